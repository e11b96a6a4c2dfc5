// Package cpupeak measures the float32 fused multiply-add peak of one CPU core, the
// bound of the compute-bound (many-mask) CPU kernels: peak FLOP/s = FMA lanes per cycle
// × 2 × clock, per core.
//
// The clock is measured with a chain of dependent vector FMAs, one every 4 cycles (the
// FMA latency of the x86 cores with AVX2 or AVX-512 since Intel Skylake and AMD Zen 2),
// since /proc/cpuinfo gives the nominal or a momentary clock and none under some
// hypervisors. The lanes per cycle (FMA units × vector lanes: 16 for two 256-bit units,
// as on AMD Zen 4 also for AVX-512, 32 for two 512-bit units) are measured with 24
// independent chains on the widest vectors the kernels use (ZMM with AVX-512F, else YMM)
// and rounded to a power of two.
package cpupeak

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/stemdot/stemdot/affinity"
)

// Peak is one core's float32 FMA peak.
type Peak struct {
	// ClockHz is the measured clock in Hz.
	ClockHz float64
	// LanesPerCycle is the float32 FMAs a core completes per cycle (units × lanes), and
	// MeasuredLanes the unrounded measurement.
	LanesPerCycle int
	MeasuredLanes float64
	// ISA names the vectors measured: "AVX-512" (ZMM) or "AVX2" (YMM).
	ISA string
}

// FLOPS is the core's peak in float32 FLOP/s: LanesPerCycle × 2 × ClockHz.
func (p Peak) FLOPS() float64 { return float64(p.LanesPerCycle) * 2 * p.ClockHz }

// String describes the peak per core: "16 lanes/cycle (AVX-512, measured 15.8) x 2 x
// 3.70 GHz = 118 GFLOP/s".
func (p Peak) String() string {
	return fmt.Sprintf("%d FMA lanes/cycle (%s, measured %.1f) x 2 x %.2f GHz = %.0f GFLOP/s",
		p.LanesPerCycle, p.ISA, p.MeasuredLanes, p.ClockHz/1e9, p.FLOPS()/1e9)
}

// ErrUnsupported is returned on CPUs without AVX2 and FMA (and off amd64).
var ErrUnsupported = errors.New("cpupeak: needs an amd64 CPU with AVX2 and FMA")

// Measure measures one core in about 0.2 s, on the calling goroutine's thread pinned to
// the last CPU it may run on (as a worker is pinned; the affinity is restored after),
// keeping the fastest of many rounds of about 0.3-1 ms: other threads sharing the core
// (or a preempted round) only slow a round down.
func Measure() (p Peak, err error) {
	if !supported() {
		return Peak{}, ErrUnsupported
	}
	cpus, err := affinity.ThreadCPUs()
	if err != nil {
		return Peak{}, err
	}
	unpin, err := affinity.Pin(cpus[len(cpus)-1:])
	if err != nil {
		return Peak{}, err
	}
	defer func() {
		if uerr := unpin(); err == nil {
			err = uerr
		}
	}()
	best := func(f func(int), n int, fmas float64) float64 {
		rate := 0.0
		for range 128 {
			start := time.Now()
			f(n)
			rate = max(rate, fmas/time.Since(start).Seconds())
		}
		return rate
	}
	const nChain, nThroughput = 1 << 16, 1 << 14
	clock := best(chain, nChain, nChain) * fmaLatency
	lanes := best(throughput, nThroughput, nThroughput*chains*float64(vectorLanes())) / clock
	return Peak{
		ClockHz:       clock,
		LanesPerCycle: 1 << int(math.Round(math.Log2(lanes))),
		MeasuredLanes: lanes,
		ISA:           isa(),
	}, nil
}

const (
	fmaLatency = 4  // cycles
	chains     = 24 // independent FMA chains of throughput
)
