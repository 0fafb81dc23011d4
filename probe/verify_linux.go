//go:build linux && (amd64 || arm64)

package probe

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/reason"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
)

// Other writers of the text. A kernel uprobe (bpftrace, perf, any BPF
// tool) writes an int3 over the first byte of the instruction it probes,
// unless that byte is an int3 already, and when it goes writes the file's
// byte back, unless the byte is no longer an int3 (the kernel's
// verify_opcode). Over a jump of ours the first write leaves int3 and the
// jump's displacement, which a thread runs as the kernel's breakpoint,
// the file's first instruction out of line, then the displacement's bytes;
// the second write leaves the file's first byte before them. The engine
// therefore:
//
//   - keeps its jumps off the first byte of a site where it can (an
//     endbr64, a one-byte nop or an instruction that may run before the
//     handler stays in place, plan.Options.KeepFirst): a kernel uprobe at
//     the address then shares the site, each counting every hit;
//   - refuses a site whose bytes hold an int3 the file does not have
//     (ReasonKernelUprobe), with what else shows a kernel uprobe there;
//   - compares the bytes of every installed site with what it wrote, at
//     each stop of the process it makes and every Options.VerifyInterval
//     in between; a site whose bytes changed is made safe and reported
//     (SiteStats.Lost): the bytes it wrote that are still there get the
//     file's back (a kernel's int3 stays, and goes with its uprobe), and the
//     site is no longer served.

// ReasonKernelUprobe is the Reason of a RejectedError for a site a kernel
// uprobe holds (its bytes hold an int3 the file does not have), and of
// SiteStats.Lost for a site whose bytes a kernel uprobe changed while it
// was installed.
const ReasonKernelUprobe = reason.KernelUprobe

// DefaultVerifyInterval is how often the bytes of the installed sites are
// compared with what the engine wrote when Options.VerifyInterval is 0.
const DefaultVerifyInterval = 10 * time.Millisecond

// verifyBudget bounds the share of one CPU the periodic comparison takes:
// the interval grows to verifyBudget times the time one comparison took.
const verifyBudget = 50

// kernelInt3 returns the offset of the first kernel breakpoint of mem
// (the bytes in memory; kernelTrap: an int3, or arm64's brk #5, at an
// offset that is a multiple of its size) that want (what should be there)
// does not have, and whether every other byte matches: a breakpoint
// another tracer wrote.
func kernelInt3(mem, want []byte) (int, bool) {
	at := -1
	n := len(kernelTrap)
	for i := 0; i < len(mem); i += n {
		j := min(i+n, len(mem))
		switch {
		case bytes.Equal(mem[i:j], want[i:j]):
		case bytes.Equal(mem[i:j], kernelTrap[:]) && at < 0:
			at = i
		default:
			return -1, false
		}
	}
	return at, at >= 0
}

// kernelEvidence says what else shows a kernel uprobe at run-time
// address addr of module mod: the process's "[uprobes]" mapping (the
// kernel maps it at the first hit of one of its uprobes) and a line of the
// tracefs uprobe_events that names the file and offset (perf and ftrace
// probes; BPF links do not show there). The world is stopped.
func (tg *target) kernelEvidence(w *proc.World, mod *module, addr uint64) string {
	var what []string
	if maps, err := w.Maps(); err == nil {
		for _, m := range maps {
			if m.Path == "[uprobes]" {
				what = append(what, "the process has the kernel's [uprobes] mapping")
				break
			}
		}
	}
	if off, err := mod.fi.f.Offset(addr - mod.bias); err == nil {
		if ev := uprobeEvent(mod.fi.path, off); ev != "" {
			what = append(what, fmt.Sprintf("tracefs uprobe_events lists %q", ev))
		}
	}
	if len(what) == 0 {
		return ""
	}
	return "; " + strings.Join(what, ", ")
}

// uprobeEventFiles are where tracefs lists the uprobe events.
var uprobeEventFiles = []string{"/sys/kernel/tracing/uprobe_events", "/sys/kernel/debug/tracing/uprobe_events"}

// uprobeEvent returns the line of the uprobe events that names file path
// at file offset off, "" if none (or none is readable).
func uprobeEvent(path string, off uint64) string {
	for _, name := range uprobeEventFiles {
		f, err := os.Open(name)
		if err != nil {
			continue
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// p[:[GRP/]EVENT] PATH:OFFSET[(REF_CTR_OFFSET)] [FETCHARGS]
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			if i < 0 {
				continue
			}
			o := fields[1][i+1:]
			if j := strings.IndexByte(o, '('); j >= 0 {
				o = o[:j]
			}
			v, err := strconv.ParseUint(o, 0, 64)
			if err == nil && v == off && elfscan.SamePath(fields[1][:i], path) {
				return sc.Text()
			}
		}
		return ""
	}
	return ""
}

// kernelInt3InView reports whether a site the plan rejects as an int3
// holds one only in the engine's own view of its file: the kernel puts
// the int3 of a uprobe registered for every process (bpftrace's, perf's)
// in every private mapping of the file that may execute, read-only ones
// like elfscan's too, and the plan reads that mapping. The file itself,
// read with pread, has another byte there. It returns the sentence of the
// refusal.
func kernelInt3InView(mod *module, ps *plannedSite) (string, bool) {
	if ps.decision.Reason != plan.ReasonTrap || !bytes.HasPrefix(ps.code, kernelTrap[:]) {
		return "", false
	}
	off, err := mod.fi.f.Offset(ps.vaddr)
	if err != nil {
		return "", false
	}
	f, err := os.Open(mod.fi.path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	var b trapBytes
	if _, err := f.ReadAt(b[:], int64(off)); err != nil || b == kernelTrap {
		return "", false
	}
	ev := ""
	if line := uprobeEvent(mod.fi.path, off); line != "" {
		ev = fmt.Sprintf("; tracefs uprobe_events lists %q", line)
	}
	return fmt.Sprintf("a kernel uprobe registered for every process holds the site: the file has %x at offset %#x, and the kernel's breakpoint is in every mapping of the file that may execute, probeopt's own view of it too%s", b[:], off, ev), true
}

// heldByKernel reports whether the bytes mem at run-time address addr
// hold an int3 that the file's bytes file do not, and returns the
// sentence of the refusal.
func (tg *target) heldByKernel(w *proc.World, s *liveSite, at uint64, mem, file []byte) (string, bool) {
	i, ok := kernelInt3(mem, file)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("a kernel uprobe (or another tracer's breakpoint) holds the site: memory holds a breakpoint at %#x where the file has %x, "+
		"which probeopt did not write%s; a jump or an int3 of probeopt there would be torn when the kernel removes its uprobe",
		at+uint64(i), file[i:min(i+len(kernelTrap), len(file))], tg.kernelEvidence(w, s.mod, at+uint64(i))), true
}

// verifyStopped compares the bytes of every installed site with what the
// engine wrote, and makes safe and reports every site whose bytes changed
// (see loseSite). The world is stopped. Between the passes of a bounded
// batch, whose sites are listed before their pass writes them, it
// compares nothing.
func (tg *target) verifyStopped(w *proc.World) {
	if len(tg.sites) == 0 || tg.passing || tg.staged != nil {
		return
	}
	if changed, buf := tg.sitesChanged(tg.verifyBuf); !changed {
		tg.verifyBuf = buf
		return
	}
	var changed []*liveSite
	for _, s := range tg.sites {
		p := s.installPatch()
		cur := make([]byte, len(p.New))
		// A site that cannot be read went with its mapping (the rescan
		// finds out) or its process.
		if err := w.ReadMemory(p.Addr, cur); err == nil && !bytes.Equal(cur, p.New) {
			changed = append(changed, s)
		}
	}
	for _, s := range changed {
		tg.loseSite(w, s)
	}
}

// loseSite handles an installed site whose bytes are no longer what the
// engine wrote: every byte that still holds the engine's gets the file's
// back (an int3 another tracer wrote stays: its removal writes the file's
// byte), the site is no longer served, and its counters say why. The
// world is stopped.
func (tg *target) loseSite(w *proc.World, s *liveSite) {
	ins := s.installPatch()
	cur := make([]byte, len(ins.New))
	if err := w.ReadMemory(ins.Addr, cur); err != nil {
		return
	}
	fix := make([]byte, len(cur))
	mine := false
	for i := range cur {
		fix[i] = cur[i]
		if cur[i] == ins.New[i] {
			fix[i] = ins.Old[i]
			mine = mine || ins.Old[i] != ins.New[i]
		}
	}
	why := fmt.Sprintf("memory holds %x at %#x where probeopt wrote %x (the file %x)", cur, ins.Addr, ins.New, ins.Old)
	code := ReasonTextMismatch
	if i, ok := kernelInt3(cur, ins.New); ok {
		code = ReasonKernelUprobe
		why = fmt.Sprintf("a kernel uprobe (or another tracer's breakpoint) wrote a breakpoint at %#x over probeopt's %s%s", ins.Addr+uint64(i), s.kind(), tg.kernelEvidence(w, s.mod, ins.Addr+uint64(i)))
	} else if restoredByKernel(cur, ins) {
		code = ReasonKernelUprobe
		why = fmt.Sprintf("the file's byte came back at %#x over probeopt's %s: a kernel uprobe registered over it has gone (the kernel served the site's hits meanwhile)", ins.Addr, s.kind())
	}
	if mine {
		p := batchpatch.Patch{Addr: ins.Addr, Old: cur, New: fix}
		steps := -1
		if mayStep(p) {
			steps = 0
		}
		if _, err := batchpatch.ApplyStopped(w, []batchpatch.Patch{p}, patchOptions(steps)); err != nil {
			why += fmt.Sprintf("; the file's bytes could not be written back: %v", err)
		} else {
			why += fmt.Sprintf("; the site was taken out, memory now holds %x", fix)
			tg.t.batches++
			tg.t.patches++
		}
	} else {
		why += "; the site was taken out"
	}
	tg.dropSite(s, code, why)
}

// restoredByKernel reports whether cur is what a kernel uprobe's removal
// leaves over the install patch ins: the file's first byte, then the
// engine's bytes.
func restoredByKernel(cur []byte, ins batchpatch.Patch) bool {
	n := len(kernelTrap)
	return len(cur) >= n && bytes.Equal(cur[:n], ins.Old[:n]) && !bytes.Equal(cur[:n], ins.New[:n]) && bytes.Equal(cur[n:], ins.New[n:])
}

// kind names what the engine wrote at a site.
func (s *liveSite) kind() string {
	if s.tramp != nil {
		return "jump to a trampoline"
	}
	return "breakpoint"
}

// dropSite forgets an installed site whose bytes the engine no longer
// controls, with the reason for its counters (SiteStats.Lost).
func (tg *target) dropSite(s *liveSite, code plan.Reason, why string) {
	delete(tg.sites, s.addr)
	if s.tramp == nil {
		tg.retired[s.addr] = s.ps.trap() // a trap already on its way is recognized
	}
	for _, r := range s.refs {
		r.c.lost, r.c.lostDetail = code, why
	}
	tg.forget(s)
	tg.publish()
}

// verifyLoop compares the bytes of the installed sites with what the
// engine wrote every interval, reading them without stopping the
// process, and stops it to make the changed ones safe (verifyStopped).
// The interval grows so that the comparison takes at most 1/verifyBudget
// of a CPU.
func (tg *target) verifyLoop(interval time.Duration) {
	defer tg.t.wg.Done()
	for wait := interval; ; {
		select {
		case <-time.After(wait):
		case <-tg.gone:
			return
		}
		t := tg.t
		t.mu.Lock()
		if tg.closed || t.closed || tg.passing || len(tg.sites) == 0 {
			t.mu.Unlock()
			continue
		}
		start := time.Now()
		var changed bool
		changed, tg.verifyBuf = tg.sitesChanged(tg.verifyBuf)
		if changed {
			_, _ = tg.p.Stopped(func(w *proc.World) error {
				tg.sync(w)
				tg.verifyStopped(w)
				return nil
			})
		}
		t.mu.Unlock()
		wait = max(interval, verifyBudget*time.Since(start))
	}
}

// sitesChanged reads the bytes of every installed site with
// process_vm_readv (a batch of sites per call) and reports whether one
// differs from what the engine wrote; buf is reused. Under Tracer.mu.
func (tg *target) sitesChanged(buf []byte) (bool, []byte) {
	type want struct {
		addr uint64
		b    []byte
	}
	wants := make([]want, 0, len(tg.sites))
	n := 0
	for _, s := range tg.sites {
		p := s.installPatch()
		wants = append(wants, want{p.Addr, p.New})
		n += len(p.New)
	}
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	const batch = 1024 // IOV_MAX
	off := 0
	for i := 0; i < len(wants); i += batch {
		ws := wants[i:min(i+batch, len(wants))]
		local := make([]unix.Iovec, len(ws))
		remote := make([]unix.RemoteIovec, len(ws))
		start := off
		for j, x := range ws {
			local[j].Base = &buf[off]
			local[j].SetLen(len(x.b))
			remote[j] = unix.RemoteIovec{Base: uintptr(x.addr), Len: len(x.b)}
			off += len(x.b)
		}
		got, err := unix.ProcessVMReadv(tg.pid, local, remote, 0)
		if err != nil || got != off-start {
			return true, buf // unreadable: the stop finds out why
		}
		at := start
		for _, x := range ws {
			if !bytes.Equal(buf[at:at+len(x.b)], x.b) {
				return true, buf
			}
			at += len(x.b)
		}
	}
	return false, buf
}
