//go:build linux

package kuprobe

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Run runs cmd (its Path, Args, Env, standard streams and directory as
// set; its SysProcAttr is replaced) with a counting kernel uprobe on every
// site, registered after the program's execve and before its first
// instruction, and returns the hits of each site, in order, once the
// program has exited. The entries of one file are counted through one Multi
// for every thread of the process (one inherited Counter per site on a
// kernel without uprobe_multi links); the returns through one inherited
// Counter each. Its children are not counted. The error of cmd.Wait (a
// status other than 0 gives an *exec.ExitError) comes with the counts.
//
// Between the execve and the registration the program is stopped under
// ptrace (PTRACE_TRACEME), and detached before it runs.
func Run(cmd *exec.Cmd, sites []Site) ([]uint64, error) {
	type result struct {
		counts []uint64
		err    error
	}
	done := make(chan result, 1)
	go func() {
		// The ptrace requests must come from the thread that started
		// the child.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		counts, err := run(cmd, sites)
		done <- result{counts, err}
	}()
	r := <-done
	return r.counts, r.err
}

func run(cmd *exec.Cmd, sites []Site) ([]uint64, error) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("wait for the execve stop of %d: status %#x, %v", pid, ws, err)
	}
	count, closeAll, err := openSites(sites, pid)
	if err != nil {
		cmd.Process.Kill()
		syscall.PtraceDetach(pid)
		cmd.Wait()
		return nil, err
	}
	defer closeAll()
	if err := syscall.PtraceDetach(pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("detach %d: %w", pid, err)
	}
	waitErr := cmd.Wait()
	counts, err := count()
	if err != nil {
		return nil, err
	}
	return counts, waitErr
}

// openSites registers the uprobes of sites for process pid: a Multi per
// file for the entries, a Counter per return. Perf events are not used for
// entries: closing one costs the kernel a grace period (about 0.1 s on a
// small machine), and with an inherited uprobe event every clone of the
// process fails with EFAULT (a Go program dies in newosproc): the uprobe
// PMU's event_init copies the file's path from attr.uprobe_path, a pointer
// into the memory of the process that opened the event, and copying an
// inherited event to a new thread runs event_init again, in the process
// that clones. A return probe has no other way here, nor an entry on a
// kernel without uprobe_multi links (before 6.6); a multi-threaded
// program with one may fail to start threads.
func openSites(sites []Site, pid int) (count func() ([]uint64, error), closeAll func(), err error) {
	var counters []*Counter
	var multis []*Multi
	closeAll = func() {
		for _, c := range counters {
			c.Close()
		}
		for _, m := range multis {
			m.Close()
		}
	}
	retAt := map[int]int{}        // site index -> counter index (returns, and entries without a Multi)
	entries := map[string][]int{} // path -> site indexes
	var order []string
	for i, s := range sites {
		if s.Return {
			c, err := Open(s.Path, s.Offset, pid, &Options{Inherit: true, Return: true})
			if err != nil {
				closeAll()
				return nil, nil, err
			}
			retAt[i] = len(counters)
			counters = append(counters, c)
			continue
		}
		if entries[s.Path] == nil {
			order = append(order, s.Path)
		}
		entries[s.Path] = append(entries[s.Path], i)
	}
	multiOf := map[string]*Multi{}
	for _, path := range order {
		offs := make([]uint64, len(entries[path]))
		for j, i := range entries[path] {
			offs[j] = sites[i].Offset
		}
		m, err := OpenMulti(path, offs, pid)
		if errors.Is(err, unix.EINVAL) {
			// A kernel without uprobe_multi links (before 6.6, such as
			// Debian 12's 6.1): one inherited counter per site.
			for _, i := range entries[path] {
				c, err := Open(path, sites[i].Offset, pid, &Options{Inherit: true})
				if err != nil {
					closeAll()
					return nil, nil, err
				}
				retAt[i] = len(counters)
				counters = append(counters, c)
			}
			delete(entries, path)
			continue
		}
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		multis = append(multis, m)
		multiOf[path] = m
	}
	return func() ([]uint64, error) {
		out := make([]uint64, len(sites))
		var errs []error
		for i, ci := range retAt {
			n, err := counters[ci].Count()
			errs = append(errs, err)
			out[i] = n
		}
		for path, m := range multiOf {
			c, err := m.Counts()
			if err != nil {
				errs = append(errs, err)
				continue
			}
			for j, i := range entries[path] {
				out[i] = c[j]
			}
		}
		return out, errors.Join(errs...)
	}, closeAll, nil
}
