package engine

import (
	"fmt"

	"github.com/stemdot/stemdot/dataset"
)

// Accumulator accumulates frames into the sum, mean, maximum and standard-deviation
// frames Reduce computes (those opt asks for; its TileFrames, Progress and NoPin are
// not used), for a caller that reads the frames itself, e.g. a live scan's frames as a
// run's workers read them (stemdot view --live's sum frame). It accumulates as Reduce's
// workers do: integer frames are summed exactly, so that the sum, mean and maximum of
// the same frames are Reduce's, bit for bit, in whatever order and grouping they were
// added (float frames: up to the order of their float64 additions). An Accumulator is
// used by one goroutine at a time: several goroutines take one each, and Merge combines
// them.
type Accumulator struct {
	acc        accumulator
	sig        [2]int
	frameBytes int
	opt        ReduceOptions
}

// NewAccumulator is an empty accumulator of frames of sig (sig_y, sig_x) pixels of
// dtype dt, of the reductions opt asks for (at least one).
func NewAccumulator(sig [2]int, dt dataset.DType, opt ReduceOptions) (*Accumulator, error) {
	if !opt.any() {
		return nil, fmt.Errorf("accumulator: nothing to compute: ask for at least one of Sum, Mean, Max and Std")
	}
	px := sig[0] * sig[1]
	acc, ok := newAccumulator(px, dt, opt)
	if !ok || px <= 0 {
		return nil, fmt.Errorf("accumulator: frames of %d×%d pixels of dtype %v cannot be accumulated", sig[0], sig[1], dt)
	}
	return &Accumulator{acc: acc, sig: sig, frameBytes: px * dt.Size(), opt: opt}, nil
}

// Add accumulates the whole frames in frames: their pixels in the accumulator's dtype,
// host byte order, aligned for it (as dataset.Dataset.ReadFrames delivers them into a
// buffer from make); a length that is not a whole number of frames panics.
func (a *Accumulator) Add(frames []byte) {
	if len(frames)%a.frameBytes != 0 {
		panic(fmt.Sprintf("engine: Accumulator.Add of %d bytes, not a whole number of %d-byte frames", len(frames), a.frameBytes))
	}
	if n := len(frames) / a.frameBytes; n > 0 {
		a.acc.add(frames, n)
	}
}

// Merge is the reduction of the frames added to accs (one or more accumulators of one
// sig shape, dtype and options), as Reduce merges its workers': Frames is their number;
// with none, the frames asked for are nil. Its Stats are zero. It reads the
// accumulators: none may be added to while it runs.
func Merge(accs ...*Accumulator) *Reduction {
	list := make([]accumulator, len(accs))
	for i, a := range accs {
		list[i] = a.acc
	}
	res := merge(list, accs[0].opt)
	res.SigShape = accs[0].sig
	if res.Frames == 0 {
		res.Sum, res.Mean, res.Max, res.Std = nil, nil, nil, nil
	}
	return res
}
