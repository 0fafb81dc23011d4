//go:build linux && (amd64 || arm64)

package probe

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/probeopt/probeopt/bpf"
	"github.com/probeopt/probeopt/bpf/maps"
	"github.com/probeopt/probeopt/elfscan"
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
	// usdt is the spec IDs of the attachment of a usdt.bpf.h program,
	// nil for any other; sp is its spec. usdtIDs is the ID of each note
	// of the files seen, by file and address, given with the first site
	// of a file (usdtErr: why a file's notes have none). Under Tracer.mu.
	usdt    *bpf.USDTLink
	sp      spec
	usdtIDs map[usdtSite]uint64
	usdtErr map[string]error
	// byAddr: the programs find their specs by the probe's address
	// (BPFOptions.USDTByAddress); ips are the addresses written to
	// __bpf_usdt_ip_to_spec_id, removed when the link closes.
	byAddr bool
	ips    map[uint64]bool
}

// usdtSite is a USDT note's address in a file.
type usdtSite struct {
	path  string
	vaddr uint64
}

// siteCookie returns the cookie of the program's call at site s: the
// attachment's, or the spec ID of the site's note for a usdt.bpf.h
// program; by address (BPFOptions.USDTByAddress), 0, the ID written to
// __bpf_usdt_ip_to_spec_id under the site's address.
func (bp *bpfProg) siteCookie(s *liveSite) (uint64, error) {
	if bp.usdt == nil {
		return bp.cookie, nil
	}
	id, err := bp.siteSpec(s)
	if err != nil || !bp.byAddr {
		return id, err
	}
	if !bp.ips[s.addr] {
		m := bp.b.inst.Maps[bpf.USDTIPMap]
		if m == nil {
			return 0, fmt.Errorf("no map %s in the object: %w", bpf.USDTIPMap, bpf.ErrUSDTLayout)
		}
		key := binary.LittleEndian.AppendUint64(nil, s.addr)
		if err := m.Update(key, binary.LittleEndian.AppendUint32(nil, uint32(id)), maps.UpdateNoExist); err != nil {
			return 0, fmt.Errorf("USDT %s at %#x: spec %d by address (another attachment has it): %w", bp.sp.text, s.addr, id, err)
		}
		bp.ips[s.addr] = true
	}
	return 0, nil
}

// siteSpec returns the spec ID of the note of a usdt.bpf.h program's
// site s (the file's notes get theirs, and their specs are written to
// the map, on its first site).
func (bp *bpfProg) siteSpec(s *liveSite) (uint64, error) {
	fi := s.mod.fi
	err, done := bp.usdtErr[fi.path]
	if !done {
		err = bp.usdtSpecs(fi)
		bp.usdtErr[fi.path] = err
	}
	if err != nil {
		return 0, err
	}
	id, ok := bp.usdtIDs[usdtSite{fi.path, s.ps.vaddr}]
	if !ok {
		return 0, fmt.Errorf("no USDT note of %s at %#x in %s: %w", bp.sp.text, s.ps.vaddr, fi.path, bpf.ErrUSDTArg)
	}
	return id, nil
}

// dropAddresses removes the program's addresses from
// __bpf_usdt_ip_to_spec_id (its link closed).
func (bp *bpfProg) dropAddresses() {
	m := bp.b.inst.Maps[bpf.USDTIPMap]
	for ip := range bp.ips {
		_ = m.Delete(binary.LittleEndian.AppendUint64(nil, ip))
	}
	clear(bp.ips)
}

// usdtSpecs gives the notes of the spec in file fi their spec IDs, in
// note order, and writes the new specs to __bpf_usdt_specs.
func (bp *bpfProg) usdtSpecs(fi *fileInfo) error {
	sites, err := fi.resolve(&bp.sp)
	if err != nil {
		return err
	}
	var notes []*elfscan.USDTProbe
	var addrs []uint64
	for i := range sites {
		if sites[i].USDT != nil {
			notes = append(notes, sites[i].USDT)
			addrs = append(addrs, sites[i].Addr)
		}
	}
	ids, err := bp.usdt.Specs(notes)
	if err != nil {
		return fmt.Errorf("%s: %w", fi.path, err)
	}
	m := bp.b.inst.Maps[bpf.USDTSpecsMap]
	for i, id := range ids {
		if id.Spec != nil {
			key := binary.LittleEndian.AppendUint32(nil, uint32(id.ID))
			if err := m.Update(key, id.Spec, maps.UpdateAny); err != nil {
				return fmt.Errorf("write USDT spec %d: %w", id.ID, err)
			}
		}
		bp.usdtIDs[usdtSite{fi.path, addrs[i]}] = uint64(id.ID)
	}
	return nil
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
	if !archBPF {
		// The JIT (bpf/jit) writes x86-64 code; the arm64 half is to come.
		return nil, fmt.Errorf("probe: BPF programs on %s: %w", runtime.GOARCH, ErrNotSupported)
	}
	obj.SetUSDTCookie(!o.USDTByAddress)
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
	usdt, err := obj.USDTSpecs()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBPF, err)
	}
	b.usdt, b.byAddr = usdt, o.USDTByAddress
	_, err = tg.p.Stopped(func(w *proc.World) error {
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

func attachBPF(b *BPF, prog, spec string, cookie uint64, usdt *bpf.USDTLink) (*Probe, func(), error) {
	bp := &bpfProg{b: b, name: prog, addr: b.code[prog], code: b.bytes[prog], cookie: cookie}
	var detach func()
	if usdt != nil {
		sp, err := parseSpec(spec)
		if err != nil {
			return nil, nil, &SpecError{Spec: spec, Err: err}
		}
		detach = func() {
			b.t.mu.Lock()
			defer b.t.mu.Unlock()
			bp.dropAddresses()
		}
		bp.usdt, bp.sp = usdt, sp
		bp.usdtIDs, bp.usdtErr = map[usdtSite]uint64{}, map[string]error{}
		bp.byAddr, bp.ips = b.byAddr, map[uint64]bool{}
	}
	out, err := b.t.addProbes([]string{spec}, bp)
	if len(out) == 0 {
		if detach != nil {
			detach()
		}
		return nil, nil, err
	}
	return out[0], detach, err
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
		// A site whose cookie has an error is refused before its slot
		// is built (checkPrograms).
		cookie, _ := r.p.prog.siteCookie(s)
		out = append(out, trampoline.Call{Addr: r.p.prog.addr, Cookie: cookie})
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
		if _, err := bp.siteCookie(s); err != nil {
			return fmt.Errorf("program %s: %w", bp.name, err)
		}
	}
	return nil
}

// dropNeedTrampoline refuses the probes of site s that need a trampoline
// it does not have: return probes and programs (a usdt.bpf.h program
// whose note's arguments are refused, with that reason).
func (b *staged) dropNeedTrampoline(s *liveSite, why string) {
	b.dropReturns(s, why)
	for _, r := range s.refs {
		if bp := r.p.prog; bp != nil && bp.usdt != nil {
			if _, err := bp.siteSpec(s); err != nil {
				b.refuseRefs(s, func(o ref) bool { return o.p == r.p }, ReasonUSDTArg, err.Error())
			}
		}
	}
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
		if r.p.prog == nil {
			return false
		}
		cookie, _ := r.p.prog.siteCookie(s)
		return !have[trampoline.Call{Addr: r.p.prog.addr, Cookie: cookie}]
	}, ReasonPatchFailed,
		"the trampoline could not be rebuilt with the program: "+why)
}

// sameCalls reports whether the installed slot of s runs the programs
// its probes attach.
func (s *liveSite) sameCalls() bool {
	return s.tramp == nil || slices.Equal(s.calls(false), s.tramp.calls) && slices.Equal(s.calls(true), s.tramp.retCalls)
}
