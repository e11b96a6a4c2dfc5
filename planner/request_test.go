package planner

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/affinity"
)

func TestParseCPUs(t *testing.T) {
	tests := []struct {
		in      string
		want    Request
		wantErr string
	}{
		{in: "4", want: Request{CPUs: 4}},
		{in: " 12 ", want: Request{CPUs: 12}},
		{in: "0", want: Request{NoCPU: true}},
		{in: "0,2,5-7", want: Request{CPUList: []int{0, 2, 5, 6, 7}}},
		{in: "5,", want: Request{CPUList: []int{5}}},
		{in: "3-3", want: Request{CPUList: []int{3}}},
		{in: "7, 1", want: Request{CPUList: []int{7, 1}}},
		{in: "", wantErr: "planner: cpus is empty; want a count (4) or a list of CPU ids (0,2,5-7)"},
		{in: "  ", wantErr: "cpus is empty"},
		{in: "four", wantErr: `cpus "four": want a count (4) or a list`},
		{in: "-1", wantErr: `bad item "-1"`},
		{in: "7-5", wantErr: `bad item "7-5"`},
		{in: "1,a", wantErr: `bad item "a"`},
		{in: "1,0-2", wantErr: `cpus "1,0-2" names CPU 1 twice`},
		{in: ",", wantErr: `cpus ",": item 1 is empty`},
		{in: "0,,1", wantErr: `cpus "0,,1": item 2 is empty; want ids or ranges a-b separated by single commas`},
		{in: ",1", wantErr: `cpus ",1": item 1 is empty`},
		{in: "1,,", wantErr: `cpus "1,,": item 2 is empty`},
		{in: "1, ,2", wantErr: `cpus "1, ,2": item 2 is empty`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			// Start from other forms: ParseCPUs must clear them.
			r := Request{CPUs: 9, CPUList: []int{8}, NoCPU: true, GPUs: 2}
			err := r.ParseCPUs(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.want.GPUs = 2
			assert.Equal(t, tc.want, r)
		})
	}
}

func TestParseGPUs(t *testing.T) {
	tests := []struct {
		in      string
		want    Request
		wantErr string
	}{
		{in: "auto", want: Request{GPUAuto: true}},
		{in: "AUTO", want: Request{GPUAuto: true}},
		{in: "2", want: Request{GPUs: 2}},
		{in: "0", want: Request{}},
		{in: "0,0", want: Request{GPUList: []int{0, 0}}},
		{in: "1,0-1", want: Request{GPUList: []int{1, 0, 1}}},
		{in: "1,", want: Request{GPUList: []int{1}}},
		{in: "", wantErr: "gpus is empty"},
		{in: "many", wantErr: `gpus "many": want "auto", a count (2) or a list of GPU indices (0,0,1)`},
		{in: "0,x", wantErr: `gpus "0,x": bad item "x"`},
		{in: "0,,1", wantErr: `gpus "0,,1": item 2 is empty`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			r := Request{GPUs: 5, GPUList: []int{3}, GPUAuto: true, CPUs: 1}
			err := r.ParseGPUs(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			tc.want.CPUs = 1
			assert.Equal(t, tc.want, r)
		})
	}
}

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr string
	}{
		{in: "141GB", want: 141_000_000_000},
		{in: "80GiB", want: 80 << 30},
		{in: "512MiB", want: 512 << 20},
		{in: "1.5GiB", want: 3 << 29},
		{in: "2 TB", want: 2_000_000_000_000},
		{in: "1tib", want: 1 << 40},
		{in: "10KB", want: 10_000},
		{in: "3KiB", want: 3072},
		{in: "7B", want: 7},
		{in: "1000", want: 1000},
		{in: "1", want: 1},
		{in: " 64 ", want: 64},
		{in: "", wantErr: `bad number ""`},
		{in: "0", wantErr: "out of range"},
		{in: "5XB", wantErr: `unknown unit "XB"`},
		{in: "GB", wantErr: `bad number ""`},
		{in: "1.2.3GB", wantErr: `bad number "1.2.3"`},
		{in: "0GB", wantErr: "out of range"},
		{in: "0.5B", wantErr: "out of range"},
		{in: "20000000TiB", wantErr: "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseBytes(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseGPUInventory(t *testing.T) {
	got, err := ParseGPUInventory("2x141GB")
	require.NoError(t, err)
	const h200 = 141_000_000_000
	assert.Equal(t, []affinity.GPU{
		{Index: 0, Name: "described GPU", TotalBytes: h200, FreeBytes: h200},
		{Index: 1, Name: "described GPU", TotalBytes: h200, FreeBytes: h200},
	}, got)

	got, err = ParseGPUInventory("1x80GiB, 2x40GB")
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []int{0, 1, 2}, []int{got[0].Index, got[1].Index, got[2].Index})
	assert.Equal(t, []uint64{80 << 30, 40e9, 40e9}, []uint64{got[0].FreeBytes, got[1].FreeBytes, got[2].TotalBytes})

	for in, wantErr := range map[string]string{
		"141GB":    `item "141GB" is not COUNTxSIZE`,
		"0x1GB":    `item "0x1GB" is not COUNTxSIZE`,
		"-1x1GB":   `item "-1x1GB" is not COUNTxSIZE`,
		"2x":       `size "" has no unit`,
		"2x141":    `size "141" has no unit (e.g. 141GB or 80GiB)`,
		"2x1GB,":   `item "" is not COUNTxSIZE`,
		"":         `item "" is not COUNTxSIZE`,
		"2x1QB":    `unknown unit "QB"`,
		"twox16GB": `item "twox16GB" is not COUNTxSIZE`,
	} {
		_, err := ParseGPUInventory(in)
		assert.ErrorContains(t, err, wantErr, "inventory %q", in)
	}
}

func TestDescribedTopology(t *testing.T) {
	topo := DescribedTopology(3)
	assert.Equal(t, &affinity.Topology{
		Allowed: []int{0, 1, 2},
		Cores: []affinity.Core{
			{Key: 0, CoreID: 0, Node: -1, CPUs: []int{0}},
			{Key: 1, CoreID: 1, Node: -1, CPUs: []int{1}},
			{Key: 2, CoreID: 2, Node: -1, CPUs: []int{2}},
		},
		Usable: 3,
	}, topo)

	_, err := Make(DescribedTopology(0), nil, Request{}, nil)
	assert.ErrorContains(t, err, "topology has 0 usable of 0 cores")
}
