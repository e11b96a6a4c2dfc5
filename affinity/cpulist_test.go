package affinity

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"0-3,6", []int{0, 1, 2, 3, 6}},
		{"0-1\n", []int{0, 1}},
		{"7", []int{7}},
		{"", []int{}},
		{"\n", []int{}},
		{"6,0-2,1", []int{0, 1, 2, 6}},
		{"2-2", []int{2}},
		{"0-2, 64-65", []int{0, 1, 2, 64, 65}},
	} {
		got, err := ParseCPUList(tc.in)
		require.NoError(t, err, "%q", tc.in)
		assert.Equal(t, tc.want, got, "%q", tc.in)
	}
}

func TestParseCPUListErrors(t *testing.T) {
	for _, tc := range []struct{ in, wantErr string }{
		{"0-3,x", `item "x"`},
		{"3-1", "range end 1 is below its start 3"},
		{"-1", `item "-1"`},
		{"0,,2", `item ""`},
		{"0-", `item "0-"`},
		{"0-7:2/4", `item "0-7:2/4"`},
	} {
		_, err := ParseCPUList(tc.in)
		require.Error(t, err, "%q", tc.in)
		assert.Contains(t, err.Error(), tc.wantErr, "%q", tc.in)
	}
}

func TestFormatCPUList(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{[]int{0, 1, 2, 3, 6}, "0-3,6"},
		{[]int{6, 3, 2, 1, 0, 3}, "0-3,6"},
		{[]int{5}, "5"},
		{[]int{0, 2, 4}, "0,2,4"},
		{[]int{0, 1, 3, 4}, "0-1,3-4"},
		{nil, ""},
	} {
		in := slices.Clone(tc.in)
		assert.Equal(t, tc.want, FormatCPUList(in), "%v", tc.in)
		assert.Equal(t, tc.in, in, "FormatCPUList must not modify its argument")
	}
}

// TestCPUListRandom checks FormatCPUList against a reference that writes every id on its
// own ("0,1,2,6"), via ParseCPUList of both, and that each range of the output is
// maximal.
func TestCPUListRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		present := map[int]bool{}
		var ids []int
		for range rng.IntN(40) {
			c := rng.IntN(70)
			ids = append(ids, c)
			present[c] = true
		}
		var want []int
		for c := range 70 {
			if present[c] {
				want = append(want, c)
			}
		}
		formatted := FormatCPUList(ids)
		got, err := ParseCPUList(formatted)
		require.NoError(t, err, formatted)
		assert.Equal(t, want, append([]int(nil), got...), formatted) // nil for the empty set

		var plain []string
		for _, c := range want {
			plain = append(plain, strconv.Itoa(c))
		}
		fromPlain, err := ParseCPUList(strings.Join(plain, ","))
		require.NoError(t, err)
		assert.Equal(t, got, fromPlain)

		for item := range strings.SplitSeq(formatted, ",") {
			if item == "" {
				continue
			}
			lo, hi, _ := strings.Cut(item, "-")
			first, _ := strconv.Atoi(lo)
			last := first
			if hi != "" {
				last, _ = strconv.Atoi(hi)
			}
			assert.False(t, present[first-1], "%s: range %s could start lower", formatted, item)
			assert.False(t, present[last+1], "%s: range %s could end higher", formatted, item)
		}
	}
}
