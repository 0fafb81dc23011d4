//go:build linux && amd64

package probe

import (
	"bytes"
	"fmt"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// bpfState is what a loaded object holds in the tracer: its mapping of
// the maps' memory.
type bpfState struct {
	mem []byte
}

// bpfProg is a program attached by a probe (probeState.prog).
type bpfProg struct {
	b      *BPF
	name   string
	addr   uint64 // its code in the process
	code   []byte
	cookie uint64 // what its get_attach_cookie returns (AttachOptions)
}

// threadStripes is the number of per-thread stripes of a target's data
// area (trampoline.Data.SetThreads), and so the copies of the per-CPU
// maps: large event rings leave fewer.
func (t *Tracer) threadStripes() int {
	threadRing := 0
	if t.opts.Events {
		threadRing = t.opts.RingSize
	}
	stripes := trampStripes
	for stripes > 1 && uint64(stripes)*uint64(threadRing)*64 > trampThreadRings {
		stripes /= 2
	}
	return stripes
}

func loadBPF(t *Tracer, obj *bpf.Object, o *BPFOptions) (*BPF, error) {
	for _, p := range obj.Programs {
		if p.Insns == nil {
			if err := obj.Verify(); err != nil {
				return nil, err
			}
			break
		}
	}
	t.opMu.Lock()
	defer t.opMu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	tg := t.root
	b := &BPF{t: t, obj: obj, code: map[string]uint64{}, bytes: map[string][]byte{}}
	_, err := tg.p.Stopped(func(w *proc.World) error {
		return b.place(w, tg, o)
	})
	if err != nil {
		if b.state.mem != nil {
			_ = unix.Munmap(b.state.mem)
		}
		return nil, err
	}
	// Return trampolines made from now on can call programs.
	t.bpfLoaded = true
	for _, tg := range t.targetList() {
		if tg.ts != nil && tg.ts.cfg.ReturnAddr == 0 {
			tg.ts.cfg.ReturnCalls = true
		}
	}
	return b, nil
}

// place maps the arena and the code of b into target tg (stopped: the
// world w), instantiates the object and writes its code.
func (b *BPF) place(w *proc.World, tg *target, o *BPFOptions) error {
	size := uint64(o.ArenaSize+4095) &^ 4095
	reach := []uint64{0x400000}
	if m := tg.mainModule(); m != nil && m.bias > reach[0] {
		reach[0] = m.bias
	}
	fd, mem, err := dataMemfd(w, tg.pid, size)
	if err != nil {
		return fmt.Errorf("the maps' memory: %w", err)
	}
	b.state.mem = mem
	addr, err := tg.placeMapping(w, reach, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED, fd)
	_, _ = w.Syscall(unix.SYS_CLOSE, uint64(fd))
	if err != nil {
		return fmt.Errorf("map the maps' memory: %w", err)
	}
	arena := maps.NewArenaMem(mem, addr)
	inst, err := b.obj.Instantiate(arena, &bpf.InstanceOptions{Stripes: tg.t.threadStripes()})
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBPF, err)
	}
	b.inst = inst
	var total uint64
	offs := map[string]uint64{}
	for _, p := range b.obj.Programs {
		c := inst.Code[p.Name]
		if c == nil {
			continue
		}
		offs[p.Name] = total
		total = (total + uint64(len(c.Bytes)) + 15) &^ 15
	}
	if total == 0 {
		return fmt.Errorf("no program compiled: %w", ErrBPF)
	}
	codeSize := (total + 4095) &^ 4095
	at, err := tg.placeMapping(w, reach, codeSize, unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, -1)
	if err != nil {
		return fmt.Errorf("map the programs' code: %w", err)
	}
	for name, off := range offs {
		c := inst.Code[name].Bytes
		if err := w.WriteMemory(at+off, c); err != nil {
			return fmt.Errorf("write the code of %s: %w", name, err)
		}
		b.code[name] = at + off
		b.bytes[name] = c
	}
	return nil
}

func attachBPF(b *BPF, prog, spec string, cookie uint64) (*Probe, error) {
	bp := &bpfProg{b: b, name: prog, addr: b.code[prog], code: b.bytes[prog], cookie: cookie}
	out, err := b.t.addProbes([]string{spec}, bp)
	if len(out) == 0 {
		return nil, err
	}
	return out[0], err
}

// calls returns the code addresses of the programs the site's probes
// attach, entry probes' or return probes', in the order of the probes.
func (s *liveSite) calls(ret bool) []trampoline.Call {
	var rs []ref
	for _, r := range s.refs {
		if r.p.prog != nil && r.p.sp.ret == ret && !r.p.removed {
			rs = append(rs, r)
		}
	}
	slices.SortFunc(rs, func(a, b ref) int { return a.p.ID - b.p.ID })
	var out []trampoline.Call
	for _, r := range rs {
		out = append(out, trampoline.Call{Addr: r.p.prog.addr, Cookie: r.p.prog.cookie})
	}
	return out
}

// hasPrograms reports whether a probe of the site attaches a program.
func (s *liveSite) hasPrograms() bool {
	for _, r := range s.refs {
		if r.p.prog != nil && !r.p.removed {
			return true
		}
	}
	return false
}

// checkPrograms checks that the process holds the code of every program
// the site's probes attach (a process image after an exec has none).
func (tg *target) checkPrograms(w *proc.World, s *liveSite) error {
	for _, r := range s.refs {
		bp := r.p.prog
		if bp == nil || r.p.removed {
			continue
		}
		got := make([]byte, len(bp.code))
		if err := w.ReadMemory(bp.addr, got); err != nil || !bytes.Equal(got, bp.code) {
			return fmt.Errorf("the process does not hold the code of program %s (its image is not the one the object was loaded into)", bp.name)
		}
	}
	return nil
}

// dropNeedTrampoline refuses the probes of site s that need a trampoline
// it does not have: return probes and programs.
func (b *staged) dropNeedTrampoline(s *liveSite, why string) {
	b.dropReturns(s, why)
	b.refuseRefs(s, func(r ref) bool { return r.p.prog != nil }, ReasonNeedsTrampoline, why)
}

// dropMissingPrograms refuses the programs of site s that its installed
// slot does not run (its rebuild failed).
func (b *staged) dropMissingPrograms(s *liveSite, why string) {
	have := map[trampoline.Call]bool{}
	for _, c := range s.tramp.calls {
		have[c] = true
	}
	for _, c := range s.tramp.retCalls {
		have[c] = true
	}
	b.refuseRefs(s, func(r ref) bool {
		return r.p.prog != nil && !have[trampoline.Call{Addr: r.p.prog.addr, Cookie: r.p.prog.cookie}]
	}, ReasonPatchFailed,
		"the trampoline could not be rebuilt with the program: "+why)
}

// sameCalls reports whether the installed slot of s runs the programs
// its probes attach.
func (s *liveSite) sameCalls() bool {
	return s.tramp == nil || slices.Equal(s.calls(false), s.tramp.calls) && slices.Equal(s.calls(true), s.tramp.retCalls)
}
