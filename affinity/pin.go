package affinity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pin locks the calling goroutine to its OS thread (runtime.LockOSThread) and sets that
// thread's CPU affinity to cpus (sched_setaffinity(2)). The returned unpin restores the
// thread's previous affinity and unlocks the goroutine; it must be called from the same
// goroutine, once (later calls do nothing).
//
// Affinity belongs to the OS thread, not to the goroutine: a goroutine started from a
// pinned one runs on other, unpinned threads, and a worker that wants its own CPU must
// call Pin itself.
//
// Errors: an empty cpus, a negative id, a CPU outside the process's allowed set ("cpu 7
// is not in this process's allowed CPUs 0-3"), a refusal by the kernel (EPERM: "not
// permitted"). On error the thread's affinity is unchanged and the goroutine is unlocked
// again.
func Pin(cpus []int) (unpin func() error, err error) {
	if len(cpus) == 0 {
		return nil, errors.New("pin: empty CPU set")
	}
	allowed, err := processCPUs()
	if err != nil {
		return nil, fmt.Errorf("pin: %w", err)
	}
	var set unix.CPUSet
	for _, c := range cpus {
		if !slices.Contains(allowed, c) {
			return nil, fmt.Errorf("pin: cpu %d is not in this process's allowed CPUs %s", c, FormatCPUList(allowed))
		}
		set.Set(c)
	}

	runtime.LockOSThread()
	var saved unix.CPUSet
	if err := unix.SchedGetaffinity(0, &saved); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("pin: reading the thread's affinity: %w", err)
	}
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		switch {
		case errors.Is(err, unix.EINVAL):
			return nil, fmt.Errorf("pin: CPUs %s are not in this process's allowed CPUs (the kernel refused them: %w)", FormatCPUList(cpus), err)
		case errors.Is(err, unix.EPERM):
			return nil, fmt.Errorf("pin: setting the thread's affinity to CPUs %s is not permitted: %w", FormatCPUList(cpus), err)
		}
		return nil, fmt.Errorf("pin: setting the thread's affinity to CPUs %s: %w", FormatCPUList(cpus), err)
	}

	tid, done := unix.Gettid(), false
	return func() error {
		if done {
			return nil
		}
		if now := unix.Gettid(); now != tid {
			return fmt.Errorf("unpin: called on OS thread %d, but Pin pinned thread %d: call it from the goroutine that called Pin", now, tid)
		}
		if err := unix.SchedSetaffinity(0, &saved); err != nil {
			// The goroutine stays locked, so that no other goroutine runs on the still
			// pinned thread; the runtime ends the thread when the goroutine exits.
			return fmt.Errorf("unpin: restoring the thread's affinity to CPUs %s: %w", FormatCPUList(cpuSetList(&saved)), err)
		}
		done = true
		runtime.UnlockOSThread()
		return nil
	}, nil
}

// ThreadCPUs returns the CPU affinity of the calling OS thread, ascending. It describes
// the calling goroutine only while that goroutine is locked to its thread (Pin, or
// runtime.LockOSThread); otherwise the goroutine may move to another thread at any time.
func ThreadCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("reading the thread's affinity: %w", err)
	}
	return cpuSetList(&set), nil
}

// processCPUs returns the CPUs this process may run on: the union of the affinity of its
// threads (/proc/self/task). Pin narrows the mask of one thread only, and the runtime's
// sysmon thread never runs goroutines, so the union is the process's mask even while
// workers are pinned.
func processCPUs() ([]int, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, fmt.Errorf("listing this process's threads: %w", err)
	}
	var union unix.CPUSet
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &set); errors.Is(err, unix.ESRCH) {
			continue // the thread has exited
		} else if err != nil {
			return nil, fmt.Errorf("reading the affinity of thread %d: %w", tid, err)
		}
		for i := range union {
			union[i] |= set[i]
		}
	}
	return cpuSetList(&union), nil
}

// cpuSetList returns the CPU ids in set, ascending.
func cpuSetList(set *unix.CPUSet) []int {
	cpus := make([]int, 0, set.Count())
	for c := 0; len(cpus) < cap(cpus); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
