package stemdot

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/errs"
	"github.com/stemdot/stemdot/live"
	_ "github.com/stemdot/stemdot/live/detectors" // the protocols' source options
)

func TestParseLiveOptions(t *testing.T) {
	lo, opt, err := ParseLiveOptions("")
	require.NoError(t, err)
	assert.Equal(t, live.Options{Active: true, Params: map[string]string{}}, lo)
	assert.Equal(t, LiveOptions{}, opt)

	lo, opt, err = ParseLiveOptions("Passive=true; nav_shape=(4, 8);record=a b.mib;float64=1;every=0.25;stream=v1;dectris_api=h:80")
	require.NoError(t, err)
	assert.Equal(t, live.Options{Active: false, Frames: 32, Params: map[string]string{"stream": "v1", "dectris_api": "h:80"}}, lo)
	assert.Equal(t, LiveOptions{NavShape: []int{4, 8}, Record: "a b.mib", Float64: true, Every: 250 * time.Millisecond}, opt)

	lo, opt, err = ParseLiveOptions("passive=true;shared=true")
	require.NoError(t, err)
	assert.Equal(t, live.Options{Shared: true, Params: map[string]string{}}, lo)
	assert.Equal(t, LiveOptions{Shared: true}, opt)

	for _, c := range []struct {
		s    string
		kind errs.Kind
		msg  string
	}{
		{"colour=blue", errs.Argument, `unknown live option "colour" (known: passive, nav_shape, record, float64, every, shared, stream (dectris), dectris_api (dectris)`},
		{"passive=maybe", errs.Argument, `option passive "maybe": want true or false`},
		{"float64=2", errs.Argument, `option float64 "2"`},
		{"nav_shape=0,4", errs.Shape, `option nav_shape "0,4": "0" is not a positive size`},
		{"every=0", errs.Argument, `option every "0": want the seconds between snapshots`},
		{"every=nan", errs.Argument, `option every "nan"`},
		{"every=1e9", errs.Argument, `option every "1e9"`},
		{"record=", errs.Argument, "option record is empty"},
		{"passive=true;passive=false", errs.Argument, "option passive given twice"},
		{"passive", errs.Argument, `live option "passive" is not key=value`},
	} {
		_, _, err := ParseLiveOptions(c.s)
		require.Error(t, err, c.s)
		assert.Equal(t, c.kind, errs.KindOf(err), "%s: %v", c.s, err)
		assert.Contains(t, err.Error(), c.msg, c.s)
	}
}
