package probe

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/hostcpu"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// deletedSuffix is what the kernel appends to the path of a mapped file
// that was removed.
const deletedSuffix = " (deleted)"

// execMapping is one executable mapping of a file.
type execMapping struct {
	path       string
	dev        string
	inode      uint64
	start, end uint64
	offset     uint64 // file offset of start
}

// execMappings lists the file-backed executable mappings, in address order.
// Anonymous memory, "[vdso]"-like regions and deleted files are left out.
func execMappings(maps []proc.Mapping) []execMapping {
	var out []execMapping
	for _, m := range maps {
		if !m.Exec || m.Path == "" || m.Path[0] != '/' || m.Inode == 0 || strings.HasSuffix(m.Path, deletedSuffix) {
			continue
		}
		out = append(out, execMapping{path: m.Path, dev: m.Dev, inode: m.Inode, start: m.Start, end: m.End, offset: m.Offset})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

// mappingsKey summarises the executable file mappings of a process, to
// tell cheaply whether they changed.
func mappingsKey(ms []execMapping) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%x-%x %s %d;", m.start, m.end, m.dev, m.inode)
	}
	return b.String()
}

// loadBias returns what to add to a link-time address of f to get its
// address in a process that maps file offset m.offset at m.start: the
// mapping must fall in an executable PT_LOAD segment.
func loadBias(f *elfscan.File, m execMapping, pageSize uint64) (uint64, error) {
	for _, s := range f.Segments {
		if !s.Exec() {
			continue
		}
		lo := s.Off &^ (pageSize - 1)
		if m.offset < lo || m.offset >= s.Off+s.Filesz {
			continue
		}
		// vaddr(x) = s.Vaddr + (x - s.Off); runtime(x) = m.start + (x - m.offset).
		return m.start - m.offset - s.Vaddr + s.Off, nil
	}
	return 0, fmt.Errorf("%s: mapping at %#x (file offset %#x) is in no executable segment: %w", m.path, m.start, m.offset, elfscan.ErrNotMapped)
}

// plannedSite is a probe site of a file, decoded and decided. It holds
// link-time addresses and is shared by every process mapping the file.
type plannedSite struct {
	vaddr  uint64
	symbol string
	code   []byte // the instruction's bytes (its length), a copy
	// inst is the decoded instruction of an x86-64 file, arm of an
	// arm64 one.
	inst decode.X86Inst
	arm  decode.ARM64Inst
	// decision is the best trap strategy (emulate, xol) or a rejection;
	// tramp the no-trap decision (trampoline-nop, trampoline-detour),
	// nil when the site cannot take a trampoline.
	decision plan.Decision
	tramp    *plan.Decision
	// body holds the file's bytes from the site to the end of its
	// function (at most maxDetourBytes), for the trampoline generator.
	body []byte
	// semaphore is the link-time address of a USDT semaphore, 0 if none.
	semaphore uint64
	// goABI marks a site in a function of the Go function table: its
	// events carry Go's argument registers (trampoline.GoArgs).
	goABI bool
	// goG, for a site of Go code in which r14 holds g, says where the
	// goroutine's id and its thread's id are (gothread.go); nil elsewhere.
	goG *trampoline.GoG
}

// maxDetourBytes bounds the bytes a detour may displace: a 5-byte jump
// over whole instructions of at most 15 bytes each.
const maxDetourBytes = 64

// fileInfo is an opened ELF file and what was learnt about it for live
// probes; the sweeps of its functions and its branch index are its
// plan.File's, made with the first plan (and so with that plan's vendor:
// one tracer, one CPU).
type fileInfo struct {
	path string
	f    *elfscan.File

	mu      sync.Mutex
	pf      *plan.File
	planned map[uint64]*plannedSite // by vaddr
	// unwinders are the plans of the unwinder's entries (planUnwinder).
	unwinders map[uint64]*plannedSite
	resolved  map[string]resolution // by spec text
	// gi is what the sites of a Go file need to read the goroutine
	// (gothread.go), made with the first Go site.
	gi *goInfo
}

// resolution is what a spec names in a file.
type resolution struct {
	sites []elfscan.Site
	err   error
}

func newFileInfo(path string, f *elfscan.File) *fileInfo {
	return &fileInfo{path: path, f: f, planned: map[uint64]*plannedSite{}, resolved: map[string]resolution{}}
}

// resolve returns the sites sp names in the file (cached).
func (fi *fileInfo) resolve(sp *spec) ([]elfscan.Site, error) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	if r, ok := fi.resolved[sp.text]; ok {
		return r.sites, r.err
	}
	sites, err := fi.f.Resolve(sp.es)
	fi.resolved[sp.text] = resolution{sites, err}
	return sites, err
}

// plan decodes and decides the site at vaddr (cached).
func (fi *fileInfo) plan(s *elfscan.Site, vendor decode.Vendor) (*plannedSite, error) {
	return fi.planWith(s, vendor, false)
}

// planUnwinder decides an entry of the unwinder, whose indirect jump
// (the context install) goes to landing pads of other functions: a detour
// may displace its first instructions. Its plans are kept apart.
func (fi *fileInfo) planUnwinder(s *elfscan.Site, vendor decode.Vendor) (*plannedSite, error) {
	return fi.planWith(s, vendor, true)
}

func (fi *fileInfo) planWith(s *elfscan.Site, vendor decode.Vendor, trusted bool) (*plannedSite, error) {
	fi.mu.Lock()
	defer fi.mu.Unlock()
	planned := fi.planned
	if trusted {
		if fi.unwinders == nil {
			fi.unwinders = map[uint64]*plannedSite{}
		}
		planned = fi.unwinders
	}
	if ps := planned[s.Addr]; ps != nil {
		return ps, nil
	}
	if fi.f.Arch != engineArch {
		return nil, fmt.Errorf("%s: %s code: %w", fi.path, fi.f.Arch, ErrNotSupported)
	}
	site, err := fi.planFile(vendor).Site(s)
	if err != nil {
		return nil, fmt.Errorf("%s: code at %#x: %w", fi.path, s.Addr, err)
	}
	code, fn := site.Code, site.Func
	ps := &plannedSite{vaddr: s.Addr, symbol: siteSymbol(s), body: code}
	// One decision with its fallback: the trampoline, and the trap
	// strategy the site takes if its trampoline cannot be placed.
	d := plan.Decide(plan.Probeopt, site, &plan.Options{Vendor: vendor, Live: true, KeepFirst: true, TrustIndirectJumps: trusted, Fallback: true})
	ps.decision = d
	if d.Fallback != nil {
		ps.decision = *d.Fallback
		d.Fallback = nil
		ps.tramp = &d
		if fn != nil && s.Addr >= fn.Addr && s.Addr-fn.Addr < uint64(len(fn.Code)) {
			ps.body = fn.Code[s.Addr-fn.Addr:]
		}
		ps.body = append([]byte(nil), ps.body[:min(len(ps.body), maxDetourBytes)]...)
	}
	if n, err := ps.decode(fi.f.Arch, code, vendor); err == nil {
		ps.code = append([]byte(nil), code[:n]...)
	} else if ps.decision.Strategy != plan.Reject || ps.tramp != nil {
		// The plan decoded it; a disagreement here is a bug, not a site.
		return nil, fmt.Errorf("%s: decode at %#x: %w", fi.path, s.Addr, err)
	}
	if s.USDT != nil {
		ps.semaphore = s.USDT.SemaphoreAddr
	}
	ps.goABI = isGoFunc(s.Func)
	if ps.goABI {
		ps.goG = fi.goG(s.Addr, s.Func, fn, vendor)
	}
	planned[s.Addr] = ps
	return ps, nil
}

// planFile returns the file's planning pipeline, made on the first call
// (under fi.mu).
func (fi *fileInfo) planFile(vendor decode.Vendor) *plan.File {
	if fi.pf == nil {
		fi.pf = plan.NewFile(fi.f, &plan.FileOptions{Vendor: vendor})
	}
	return fi.pf
}

// isGoFunc reports whether fn is listed by the Go function table: Go's
// runtime walks its frames, and its code follows Go's register ABI.
func isGoFunc(fn *elfscan.Func) bool { return fn != nil && fn.Sources&elfscan.FromPclntab != 0 }

// goReturns returns the sites of a return probe on the Go function whose
// entry is s: its return instructions, each probed as an instruction,
// since the Go runtime cannot walk a stack whose return address was
// replaced (it reads the caller from the return address: "unknown caller
// pc"), and copies stacks as they grow. jumps are the direct jumps by
// which the function leaves otherwise (tail calls), whose returns are not
// counted; indirect jumps are taken to be its own jump tables. ok is
// false for a site that is not the entry of such a function, or one whose
// code does not decode.
func (fi *fileInfo) goReturns(s *elfscan.Site, vendor decode.Vendor) (rets []elfscan.Site, jumps []plan.Exit, ok bool) {
	if !isGoFunc(s.Func) || s.Addr != s.Func.Addr || fi.f.Arch != decode.X86_64 {
		return nil, nil, false
	}
	fi.mu.Lock()
	pf := fi.planFile(vendor)
	fi.mu.Unlock()
	fn := pf.Function(s.Func)
	if fn == nil || fn.Err != nil {
		return nil, nil, false
	}
	for _, e := range fn.Exits() {
		switch e.Kind {
		case decode.BranchRet, decode.BranchRetImm:
			r := elfscan.Site{Kind: elfscan.SiteInst, Addr: e.Addr, Func: s.Func}
			r.Offset, r.OffsetErr = fi.f.TextOffset(e.Addr)
			rets = append(rets, r)
		case decode.BranchJmp:
			jumps = append(jumps, e)
		}
	}
	return rets, jumps, true
}

// decode decodes the site's instruction from code (inst, or arm for an
// arm64 file) and returns its length.
func (ps *plannedSite) decode(arch decode.Arch, code []byte, vendor decode.Vendor) (int, error) {
	if arch == decode.ARM64 {
		inst, err := decode.DecodeARM64(code, ps.vaddr)
		ps.arm = inst
		return inst.Len, err
	}
	err := (decode.X86Decoder{Vendor: vendor}).Decode(code, ps.vaddr, &ps.inst)
	return ps.inst.Len, err
}

// engineArch is the instruction set of the code the live engine probes:
// the host's (its processes run the tracer's own instruction set).
var engineArch = map[string]decode.Arch{"amd64": decode.X86_64, "arm64": decode.ARM64}[runtime.GOARCH]

// siteSymbol names a site for reports: "func", "func+0x10",
// "usdt:provider:name".
func siteSymbol(s *elfscan.Site) string {
	switch {
	case s.USDT != nil:
		return "usdt:" + s.USDT.Provider + ":" + s.USDT.Name
	case s.Func == nil:
		return ""
	case s.Addr == s.Func.Addr:
		return s.Func.Name
	}
	return fmt.Sprintf("%s+%#x", s.Func.Name, s.Addr-s.Func.Addr)
}

// fileCache opens each file once per tracer.
type fileCache struct {
	mu    sync.Mutex
	files map[string]*fileInfo // by dev:inode
}

// open returns the file mapped as m in process pid: the path as the
// process sees it (through /proc/PID/root, for a process in another mount
// namespace), checked to be the same file (device and inode) as the one
// mapped.
func (c *fileCache) open(pid int, m execMapping) (*fileInfo, error) {
	key := fmt.Sprintf("%s:%d", m.dev, m.inode)
	c.mu.Lock()
	defer c.mu.Unlock()
	if fi := c.files[key]; fi != nil {
		return fi, nil
	}
	var firstErr error
	for _, p := range []string{fmt.Sprintf("/proc/%d/root%s", pid, m.path), m.path, fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end)} {
		if !sameInode(p, m.inode) {
			continue
		}
		f, err := elfscan.Open(p)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		// The identity of the file actually read, not of the path a
		// moment before: a file replaced in between is not the mapping's.
		// (Only the inode: on overlay file systems the device in
		// /proc/PID/maps is not the one stat reports.)
		if f.Ino != 0 && f.Ino != m.inode {
			f.Close()
			continue
		}
		fi := newFileInfo(m.path, f)
		if c.files == nil {
			c.files = map[string]*fileInfo{}
		}
		c.files[key] = fi
		return fi, nil
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("open %s: %w", m.path, os.ErrNotExist)
	}
	return nil, firstErr
}

// close closes every file.
func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, fi := range c.files {
		fi.f.Close()
	}
	c.files = nil
}

// hostVendor says which vendor's decoding rules this CPU follows
// (hostcpu.Info.X86Vendor): Intel for GenuineIntel and, as far as their
// uncharacterised differences allow, for the Intel-compatible Centaur
// (VIA) and Zhaoxin parts; AMD for AMD and Hygon, and for a CPU whose
// vendor cannot be told (the decoder's default, objdump's).
func hostVendor() decode.Vendor { return decodeVendor(hostcpu.Host()) }

// decodeVendor is hostVendor for the CPU that i describes.
func decodeVendor(i *hostcpu.Info) decode.Vendor {
	v, err := i.X86Vendor()
	if errors.Is(err, hostcpu.ErrUnknownVendor) {
		return decode.VendorAMD
	}
	return v
}

// errNoModule is the cause of a main-executable spec in a process whose
// executable is not mapped as a file (it was deleted, say).
var errNoModule = errors.New("the main executable is not mapped from a file")
