package masks

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMatchesGenerators(t *testing.T) {
	sig := [2]int{12, 14}
	must := func(s *Stack, err error) *Stack {
		t.Helper()
		require.NoError(t, err)
		return s
	}
	cases := []struct {
		spec string
		want *Stack
	}{
		{"disk:6,5,3", must(Disk(sig, 6, 5, 3))},
		{" Disk: 6.5 , 5.25, 2.5 ", must(Disk(sig, 6.5, 5.25, 2.5))},
		{"ring:7,6,2,5", must(Ring(sig, 7, 6, 2, 5))},
		{"ring:7,6,2.5,1e1", must(Ring(sig, 7, 6, 2.5, 10))},
		{"point:13,11", must(Point(sig, 13, 11))},
		{"rect:0,0,14,12", must(Rect(sig, 0, 0, 14, 12))},
		{"rect:2,3,4,5", must(Rect(sig, 2, 3, 4, 5))},
		{"com", must(COM(sig, 7, 6, 0))},
		{"com:6.5,5.5", must(COM(sig, 6.5, 5.5, 0))},
		{"com:6.5,5.5,4", must(COM(sig, 6.5, 5.5, 4))},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			s, err := Parse(c.spec, sig)
			require.NoError(t, err)
			assert.Equal(t, c.want, s)
		})
	}
}

func TestParseCOMDefaultCentre(t *testing.T) {
	// LiberTEM CoMUDF's default reference point (sig_y//2, sig_x//2), whole frame.
	s, err := Parse("com", [2]int{5, 8})
	require.NoError(t, err)
	assert.Equal(t, float32(0-2), s.Mask(1)[0], "com_y at row 0")
	assert.Equal(t, float32(0-4), s.Mask(2)[0], "com_x at column 0")
	assert.Equal(t, float32(4-2), s.Mask(1)[4*8+7], "com_y at row 4")
	assert.Equal(t, float32(7-4), s.Mask(2)[4*8+7], "com_x at column 7")
	for _, v := range s.Mask(0) {
		require.Equal(t, float32(1), v)
	}
}

func TestParseErrors(t *testing.T) {
	sig := [2]int{10, 12}
	cases := []struct{ spec, want string }{
		{"", `mask "": unknown mask kind "" (want disk, ring, point, rect or com)`},
		{"annulus:1,2,3,4", `mask "annulus:1,2,3,4": unknown mask kind "annulus"`},
		{"disk", `mask "disk": got 0 arguments, want disk:CX,CY,R`},
		{"disk:1,2", "got 2 arguments, want disk:CX,CY,R"},
		{"disk:1,2,3,", "got 4 arguments, want disk:CX,CY,R"},
		{"disk:1,x,3", `argument 2 "x" is not a finite number (disk:CX,CY,R)`},
		{"disk:1,2,NaN", `argument 3 "NaN" is not a finite number`},
		{"disk:1,2,inf", `argument 3 "inf" is not a finite number`},
		{"disk:5,5,0", "disk: radius must be positive and finite, got 0"},
		{"com:5,5,0", "com: radius must be positive and finite, got 0 (leave R out for the whole frame: com:CX,CY)"},
		{"disk:5,5,-1", "disk: radius must be positive and finite, got -1"},
		{"disk:50,5,3", "disk at (cx=50, cy=5) with r=3 selects no pixel of the frame of sig_shape (10, 12)"},
		{"ring:5,5,3", "got 3 arguments, want ring:CX,CY,RI,RO"},
		{"ring:5,5,3,3", "inner radius 3 must be less than outer radius 3"},
		{"ring:5,5,4,2", "inner radius 4 must be less than outer radius 2"},
		{"ring:5,5,-1,2", "inner radius must be 0 or positive, and finite, got -1"},
		{"ring:5,5,+Inf,2", `argument 3 "+Inf" is not a finite number`},
		{"point:1", "got 1 arguments, want point:X,Y"},
		{"point:1.5,2", `argument 1 "1.5" is not an integer (point:X,Y)`},
		{"point:12,0", "point: pixel (x=12, y=0) is outside the frame of sig_shape (10, 12)"},
		{"point:0,-1", "point: pixel (x=0, y=-1) is outside the frame"},
		{"rect:12,0,13,1", "rect (x=12, y=0, w=13, h=1) selects no pixel of the frame of sig_shape (10, 12)"},
		{"rect:0,0,0,1", "rect: width 0 and height 1 must be positive"},
		{"rect:0,0,1", "got 3 arguments, want rect:X,Y,W,H"},
		{"com:", "got 0 arguments, want com or com:CX,CY[,R]"},
		{"com:1", "got 1 arguments, want com or com:CX,CY[,R]"},
		{"com:1,2,3,4", "got 4 arguments"},
		{"com:5,5,-2", "com: radius must be positive and finite, got -2"},
		{"com:100,100,5", "selects no pixel"},
	}
	for _, c := range cases {
		t.Run(c.spec, func(t *testing.T) {
			s, err := Parse(c.spec, sig)
			assert.Nil(t, s)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			assert.Contains(t, err.Error(), `mask "`+c.spec+`"`)
		})
	}
}
