package merlin

import (
	"context"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stemdot/stemdot/live"
)

// BenchmarkReceive measures what comes through a receiver on loopback from Serve
// sending 256×256 12-bit raw (R64) frames (131,456 bytes of frame header and pixels,
// 131,471 with the MPX prefix; MB/s counts the latter), an acquisition of b.N frames
// started on the control port:
//
//   - socket: a reader that only reads the socket into one 1 MiB buffer, the floor;
//   - receiver: Next and Release, the frames not decoded;
//   - decode: Next, then Decode and Release on GOMAXPROCS workers.
//
// The figure to compare is receiver (and decode) over socket, from one run. Each also
// reports the process's CPU time a frame (cpu-µs/frame: sender, reader and consumer
// together), steadier than the throughput on a shared machine.
func BenchmarkReceive(b *testing.B) {
	const frames = 64
	path := writeR64(b, frames, 384, "01,0256,0256,R64,   1x1,01,x,12", 256*256*2)
	src, err := FromMIB(path, nil)
	require.NoError(b, err)
	defer src.Close()
	ctrl := listen(b)
	data := serve(b, src, ServeOptions{Control: ctrl})
	msg := prefixBytes + src.recordBytes

	b.Run("socket", func(b *testing.B) {
		b.SetBytes(int64(msg))
		conn, err := net.Dial("tcp", data)
		require.NoError(b, err)
		defer conn.Close()
		c, err := dialControl(context.Background(), ctrl.Addr().String(), 10*time.Second)
		require.NoError(b, err)
		defer c.close()
		for _, cmd := range [][3]string{{"SET", "NUMFRAMESTOACQUIRE", strconv.Itoa(b.N)}, {"CMD", "STARTACQUISITION"}} {
			_, err := c.do(context.Background(), cmd[0], cmd[1], cmd[2])
			require.NoError(b, err)
		}
		buf := make([]byte, 1<<20)
		hdr := prefixBytes + len(setHdrField(src.hdr, hdrFrames, strconv.Itoa(b.N)))
		_, err = io.ReadFull(conn, buf[:hdr])
		require.NoError(b, err)
		b.ResetTimer()
		defer cpuPerFrame(b)()
		for left := b.N * msg; left > 0; {
			n, err := io.ReadFull(conn, buf[:min(left, len(buf))])
			require.NoError(b, err)
			left -= n
		}
	})
	receive := func(b *testing.B, decode bool) {
		b.SetBytes(int64(msg))
		ctx := context.Background()
		r := New(Options{Addr: data, Control: ctrl.Addr().String(), Frames: b.N})
		defer r.Close()
		h, err := r.Start(ctx)
		require.NoError(b, err)
		b.ResetTimer()
		defer cpuPerFrame(b)()
		work := make(chan live.Frame, 64)
		var wg sync.WaitGroup
		if decode {
			for range runtime.GOMAXPROCS(0) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					dst := make([]byte, h.FrameBytes())
					for f := range work {
						if err := r.Decode(dst, f); err != nil {
							panic(err)
						}
						r.Release(f)
					}
				}()
			}
		}
		var batch []live.Frame
		n := 0
		for {
			batch, err = r.Next(ctx, batch[:0])
			if err != nil {
				break
			}
			for _, f := range batch {
				if decode {
					work <- f
				} else {
					r.Release(f)
				}
			}
			n += len(batch)
		}
		close(work)
		wg.Wait()
		require.Equal(b, io.EOF, err)
		require.Equal(b, b.N, n)
	}
	b.Run("receiver", func(b *testing.B) { receive(b, false) })
	b.Run("decode", func(b *testing.B) { receive(b, true) })
}

// cpuPerFrame starts counting the process's CPU time (user and system); the function
// it returns reports it per frame (b.N frames).
func cpuPerFrame(b *testing.B) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	t0 := cpu()
	return func() { b.ReportMetric(float64(cpu()-t0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/frame") }
}
