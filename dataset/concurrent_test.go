package dataset_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/dataset"
	"github.com/stemdot/stemdot/dataset/internal/frametest"
)

func TestConcurrentReadFrames(t *testing.T) {
	for _, format := range []string{"mib", "npy", "raw"} {
		t.Run(format, func(t *testing.T) {
			nav, sig := []int{8, 8}, [2]int{32, 48}
			path := filepath.Join(t.TempDir(), "c."+format)
			want := frametest.WriteRandom(t, path, format, nav, sig)
			d, err := dataset.Open(path, dataset.Options{NavShape: nav, SigShape: sig[:], DType: dataset.Uint16})
			require.NoError(t, err)
			defer d.Close()
			fb := d.FrameBytes()
			var wg sync.WaitGroup
			errs := make(chan error, 16)
			for g := range 16 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 99))
					buf := make([]byte, 64*fb)
					for range 50 {
						start := rng.IntN(64)
						end := start + 1 + rng.IntN(64-start)
						if err := d.ReadFrames(start, end, buf); err != nil {
							errs <- err
							return
						}
						if !bytes.Equal(buf[:(end-start)*fb], want[start*fb:end*fb]) {
							errs <- fmt.Errorf("goroutine %d: frames [%d, %d) differ", g, start, end)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

// BenchmarkReadFrames reads a 256×256 uint16 file in 16-frame tiles (bytes/s counts the
// delivered frame bytes).
func BenchmarkReadFrames(b *testing.B) {
	for _, format := range []string{"mib", "npy"} {
		b.Run(format, func(b *testing.B) {
			nav, sig := []int{8, 16}, [2]int{256, 256}
			path := filepath.Join(b.TempDir(), "bench."+format)
			frametest.WriteRandom(b, path, format, nav, sig)
			d, err := dataset.Open(path, dataset.Options{})
			require.NoError(b, err)
			defer d.Close()
			const tile = 16
			buf := make([]byte, tile*d.FrameBytes())
			b.SetBytes(int64(len(buf)))
			for i := 0; b.Loop(); i++ {
				start := (i * tile) % d.NumFrames()
				if err := d.ReadFrames(start, start+tile, buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
