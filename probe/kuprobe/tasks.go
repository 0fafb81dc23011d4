package kuprobe

import (
	"errors"
	"fmt"
	"os"
	"strconv"
)

// Tasks counts the hits of one uprobe in each thread a process has when
// it is opened, with one counter per thread. Open it while the threads
// exist and have not run the probed code yet, for example while the
// process is stopped. With Options.Inherit, a thread the process creates
// later fails to start (EFAULT from clone: the kernel reads the uprobe's
// path again, in the creating process's memory).
type Tasks struct {
	Counters []*Counter
}

// OpenTasks opens a counter on the instruction at file offset offset of
// path for each thread of process pid.
func OpenTasks(path string, offset uint64, pid int, opts *Options) (*Tasks, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, fmt.Errorf("threads of %d: %w", pid, err)
	}
	t := &Tasks{}
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, err := Open(path, offset, tid, opts)
		if err != nil {
			t.Close()
			return nil, err
		}
		t.Counters = append(t.Counters, c)
	}
	return t, nil
}

// Count returns the hits of every thread.
func (t *Tasks) Count() (uint64, error) {
	var n uint64
	for _, c := range t.Counters {
		v, err := c.Count()
		if err != nil {
			return 0, err
		}
		n += v
	}
	return n, nil
}

// Close removes the probes.
func (t *Tasks) Close() error {
	var errs []error
	for _, c := range t.Counters {
		errs = append(errs, c.Close())
	}
	t.Counters = nil
	return errors.Join(errs...)
}
