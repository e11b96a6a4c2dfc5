package affinity

import (
	"fmt"
	"runtime"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func processAllowed(t *testing.T) []int {
	t.Helper()
	allowed, err := processCPUs()
	require.NoError(t, err)
	require.NotEmpty(t, allowed)
	return allowed
}

func TestPinEachAllowedCPU(t *testing.T) {
	allowed := processAllowed(t)
	// The outer lock keeps this goroutine on its thread after unpin, so that ThreadCPUs
	// then reads the same thread that Pin pinned.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := ThreadCPUs()
	require.NoError(t, err)

	for _, c := range allowed {
		unpin, err := Pin([]int{c})
		require.NoError(t, err, "cpu %d", c)
		got, err := ThreadCPUs()
		require.NoError(t, err)
		assert.Equal(t, []int{c}, got, "after Pin([%d])", c)
		assert.Equal(t, allowed, processAllowed(t), "the process's allowed set while a thread is pinned")

		require.NoError(t, unpin())
		got, err = ThreadCPUs()
		require.NoError(t, err)
		assert.Equal(t, before, got, "after unpin of cpu %d", c)
		require.NoError(t, unpin(), "a second unpin does nothing")
		got, err = ThreadCPUs()
		require.NoError(t, err)
		assert.Equal(t, before, got)
	}
}

func TestPinSet(t *testing.T) {
	allowed := processAllowed(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := ThreadCPUs()
	require.NoError(t, err)

	unpin, err := Pin(allowed)
	require.NoError(t, err)
	got, err := ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, allowed, got)

	// Nested: pin the already pinned thread to one CPU, then undo both in order.
	inner, err := Pin(allowed[len(allowed)-1:])
	require.NoError(t, err)
	got, err = ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, allowed[len(allowed)-1:], got)
	require.NoError(t, inner())
	got, err = ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, allowed, got)
	require.NoError(t, unpin())
	got, err = ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, before, got)
}

func TestPinErrors(t *testing.T) {
	allowed := processAllowed(t)
	outside := slices.Max(allowed) + 1
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before, err := ThreadCPUs()
	require.NoError(t, err)

	for _, tc := range []struct {
		cpus    []int
		wantErr string
	}{
		{nil, "empty CPU set"},
		{[]int{}, "empty CPU set"},
		{[]int{outside}, fmt.Sprintf("cpu %d is not in this process's allowed CPUs %s", outside, FormatCPUList(allowed))},
		{[]int{allowed[0], outside}, fmt.Sprintf("cpu %d is not in this process's allowed CPUs %s", outside, FormatCPUList(allowed))},
		{[]int{-1}, fmt.Sprintf("cpu -1 is not in this process's allowed CPUs %s", FormatCPUList(allowed))},
		{[]int{4096}, fmt.Sprintf("cpu 4096 is not in this process's allowed CPUs %s", FormatCPUList(allowed))},
	} {
		unpin, err := Pin(tc.cpus)
		require.Error(t, err, "%v", tc.cpus)
		assert.Nil(t, unpin)
		assert.Contains(t, err.Error(), tc.wantErr)
		got, err := ThreadCPUs()
		require.NoError(t, err)
		assert.Equal(t, before, got, "a failed Pin(%v) leaves the thread's affinity", tc.cpus)
	}
}

// TestPinNotInherited checks what the runtime guarantees for a goroutine started from a
// pinned one: while the pinned goroutine holds its thread no other goroutine runs there,
// so the child runs on another thread; and that thread has the process's affinity, as
// Pin changed only the pinned thread (the runtime starts threads needed by a locked
// goroutine from its template thread, never by cloning the locked one).
func TestPinNotInherited(t *testing.T) {
	allowed := processAllowed(t)
	if len(allowed) < 2 {
		t.Skipf("needs 2 allowed CPUs to tell a pinned thread from an unpinned one; allowed: %s", FormatCPUList(allowed))
	}
	unpin, err := Pin(allowed[:1])
	require.NoError(t, err)
	defer func() { require.NoError(t, unpin()) }()
	parentTID := unix.Gettid()

	type childResult struct {
		tid  int
		cpus []int
		err  error
	}
	done := make(chan childResult)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		cpus, err := ThreadCPUs()
		done <- childResult{unix.Gettid(), cpus, err}
	}()
	child := <-done
	require.NoError(t, child.err)
	assert.NotEqual(t, parentTID, child.tid, "the child ran on the pinned goroutine's locked thread")
	assert.Equal(t, allowed, child.cpus, "the child's thread inherited the pin")

	cpus, err := ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, allowed[:1], cpus, "the parent is still pinned")
}

func TestUnpinOnOtherThread(t *testing.T) {
	allowed := processAllowed(t)
	unpin, err := Pin(allowed[:1])
	require.NoError(t, err)
	errs := make(chan error)
	go func() {
		// This goroutine cannot run on the pinned goroutine's locked thread.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errs <- unpin()
	}()
	err = <-errs
	require.Error(t, err)
	assert.Contains(t, err.Error(), "call it from the goroutine that called Pin")
	got, err := ThreadCPUs()
	require.NoError(t, err)
	assert.Equal(t, allowed[:1], got, "the pinned thread stays pinned")
	require.NoError(t, unpin())
}
