package synth

import (
	"math"
	"math/rand/v2"
	"sync"
)

// Poisson sampling.
//
// Expected counts λ below tableMax are drawn exactly by inverse transform from
// precomputed cumulative tables, one per λ on a grid of step 1/tableStep; λ is first
// rounded to that grid, so the sampled mean is off by at most 1/(2·tableStep) = 1/128
// count. Each table stores CDF(k)·2^64 as uint64 up to the k where the remaining tail is
// below 2^-53 (about 1e-16), and a guide (Chen & Asau) of guideSize entries indexed by
// the top bits of the uniform number starts the search at most a few entries before the
// answer.
//
// λ ≥ tableMax is drawn from the normal approximation round(λ + √λ·z), clipped at 0:
// mean λ, variance λ + 1/12 (the rounding), skewness 0 instead of λ^-½ ≤ 0.125.
const (
	tableStep = 64
	tableMax  = 64
	guideBits = 6
	guideSize = 1 << guideBits
)

// poissonTables holds the cumulative tables of every grid λ = i/tableStep < tableMax.
type poissonTables struct {
	cdf   []uint64 // all tables back to back
	start []int32  // table i is cdf[start[i]:start[i+1]]
	guide []uint8  // guideSize entries per table: index into the table to start from
}

var (
	tablesOnce sync.Once
	tables     *poissonTables
)

// poisson returns the shared Poisson tables, building them on first use (a few ms).
func poisson() *poissonTables {
	tablesOnce.Do(func() { tables = buildPoissonTables() })
	return tables
}

func buildPoissonTables() *poissonTables {
	n := tableMax * tableStep
	t := &poissonTables{start: make([]int32, n+1), guide: make([]uint8, n*guideSize)}
	const two64 = 18446744073709551616.0 // 2^64
	for i := range n {
		lam := float64(i) / tableStep
		t.start[i] = int32(len(t.cdf))
		pmf, cum := math.Exp(-lam), 0.0
		for k := 0; ; k++ {
			cum += pmf
			if cum >= 1-0x1p-53 || k == 255 {
				t.cdf = append(t.cdf, math.MaxUint64)
				break
			}
			t.cdf = append(t.cdf, uint64(cum*two64))
			pmf *= lam / float64(k+1)
		}
		tab := t.cdf[t.start[i]:]
		k := 0
		for g := range guideSize {
			lo := uint64(g) << (64 - guideBits) // smallest uniform value in bucket g
			for lo >= tab[k] {
				k++
			}
			t.guide[i*guideSize+g] = uint8(k)
		}
	}
	t.start[n] = int32(len(t.cdf))
	return t
}

// sample draws a Poisson count of mean lam (lam >= 0).
func (t *poissonTables) sample(rng *rand.Rand, lam float64) uint32 {
	i := int(lam*tableStep + 0.5)
	if i < tableMax*tableStep {
		u := rng.Uint64()
		tab := t.cdf[t.start[i]:t.start[i+1]]
		k := int(t.guide[i*guideSize+int(u>>(64-guideBits))])
		for u >= tab[k] && k < len(tab)-1 {
			k++
		}
		return uint32(k)
	}
	v := math.Round(lam + math.Sqrt(lam)*rng.NormFloat64())
	if v < 0 {
		return 0
	}
	if v > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(v)
}
