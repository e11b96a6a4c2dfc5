package cli

import (
	"bytes"
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// onInterrupt cancels the command's context at the first signal; outside a step of
// handleInterrupts, or at a second signal, it ends the process with status 1.
func TestOnInterrupt(t *testing.T) {
	for _, handled := range []bool{false, true} {
		sigs := make(chan os.Signal, 2)
		ctx, cancel := context.WithCancel(t.Context())
		exited := make(chan int, 1)
		var stderr bytes.Buffer
		interruptsHandled.Store(handled)
		done := make(chan struct{})
		go func() {
			onInterrupt(sigs, cancel, &stderr, func(code int) { exited <- code })
			close(done)
		}()
		sigs <- os.Interrupt
		<-ctx.Done()
		if handled {
			select {
			case code := <-exited:
				t.Fatalf("exit(%d) during a step that handles interrupts", code)
			case <-time.After(50 * time.Millisecond):
			}
			sigs <- syscall.SIGTERM // a second interrupt ends it
		}
		require.Equal(t, 1, <-exited)
		<-done
		require.Equal(t, "stemdot: interrupted\n", stderr.String())
	}
	interruptsHandled.Store(false)
}
