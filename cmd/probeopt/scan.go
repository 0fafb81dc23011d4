package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
)

type scanOptions struct {
	json    bool
	summary bool
	traps   bool
	sites   []string
	policy  string
	vendor  string
}

func newScanCmd() *cobra.Command {
	var o scanOptions
	cmd := &cobra.Command{
		Use:   "scan [PATH...]",
		Short: "List the probe sites of ELF files and how each policy would probe them",
		Long: `Scan ELF64 little-endian executables, PIEs and shared libraries for x86-64
and arm64: find the probe sites (by default the entry of every function and
every USDT probe), decode the instruction at each, and say how each policy
would probe it: the strategy (reject, emulate, xol, trampoline-nop,
trampoline-detour) and a stable reason code.

Policies: linux-uprobes predicts what the Linux 6.18 kernel's uprobes do
(refuse, emulate, single-step out of line, or optimize a nop5 into a call to
its trampoline); probeopt is the best correct strategy probeopt supports
today. With --traps, probeopt leaves trampolines out and decides as
"probeopt trace --traps" serves a site: emulate it, run it out of line, or
reject it (the share of sites emulated is the emulator's coverage).
"probeopt explain PATH SPEC" shows one site in depth.

Without PATH, scan reads its own executable. A PATH may be a directory: the
regular files below it are scanned, and those that are not ELF, or ELF files
of another kind (32-bit, another machine), are skipped and counted. Every
function is decoded linearly from its start; functions whose sweep meets
bytes that do not decode are counted.

--sites takes a comma-separated list (the flag may be repeated) of:
  entries   the first instruction of every function (PLT stubs excepted)
  usdt      every USDT probe (.note.stapsdt)
  all       every instruction of every function, and every USDT probe
  SPEC      SYM, SYM+OFF, 0xADDR, usdt:PROVIDER:NAME, with globs (tcp_*,
            usdt:postgresql:*), or the bpftrace forms uprobe:PATH:SYM and
            usdt:PATH:PROVIDER:NAME (such a spec also names the file to
            scan when no PATH is given)

Output: a table per file (address, kind, symbol, instruction, length, and a
strategy and reason per policy), then a summary; --summary prints only the
summary (counts and percentages per strategy and policy, and per reason).
--json prints one JSON object per site, one per line, then one summary
object with "summary": true; the fields are described in the README.

A file that cannot be read is reported on stderr (or as a JSON object with
"file" and "error") and makes the exit status 1; the other files are still
scanned. A directory in which no file can be scanned is reported the same
way. A SPEC that matches nothing in a file is a warning on stderr that names
the closest names the file has; it does not change the exit status. USDT
probes with a semaphore are listed under the table: enabling them needs a
running process (a pid). Progress is shown on stderr when several files are
scanned and stderr is a terminal.`,
		Example: `  probeopt scan
  probeopt scan --summary /usr/lib/x86_64-linux-gnu/libLLVM-15.so.1
  probeopt scan --sites usdt --policy linux-uprobes /usr/lib/postgresql/15/bin/postgres
  probeopt scan --sites 'usdt:python:*' --json /usr/bin/python3.11
  probeopt scan --sites 'main,parse_*+0x10' ./a.out
  probeopt scan --sites uprobe:/bin/bash:readline
  probeopt scan --summary /usr/bin`,
		Args: argsRange(0, -1, "PATH"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runScan(cmd, &o, args)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print one JSON object per site, one per line, then a summary object")
	f.BoolVar(&o.summary, "summary", false, "print only the summary: counts and percentages per strategy and policy")
	f.StringArrayVar(&o.sites, "sites", nil, "probe sites: entries, usdt, all, or SPECs, comma-separated (default entries,usdt)")
	f.StringVar(&o.policy, "policy", "both", "decide under `POLICY`: linux-uprobes, probeopt or both")
	f.BoolVar(&o.traps, "traps", false, "probeopt policy without trampolines: only trap strategies (emulate, xol)")
	f.StringVar(&o.vendor, "vendor", "amd", "follow `VENDOR` where x86-64 CPUs decode differently (probeopt policy): amd, intel, or host")
	return cmd
}

// siteSelector is the parsed --sites.
type siteSelector struct {
	entries, usdt, all bool
	specs              []elfscan.Spec
}

// specPaths returns the files named by bpftrace-form specs.
func (s *siteSelector) specPaths() []string {
	var out []string
	seen := map[string]bool{}
	for _, sp := range s.specs {
		if sp.Path != "" && !seen[sp.Path] {
			seen[sp.Path] = true
			out = append(out, sp.Path)
		}
	}
	return out
}

// parseSites parses the --sites values.
func parseSites(vals []string) (siteSelector, error) {
	var sel siteSelector
	if len(vals) == 0 {
		vals = []string{"entries,usdt"}
	}
	for _, v := range vals {
		for _, item := range splitList(v) {
			switch item {
			case "entries":
				sel.entries = true
			case "usdt":
				sel.usdt = true
			case "all":
				sel.all, sel.usdt = true, true
			case "":
				return sel, usagef("invalid --sites %q: empty item", v)
			default:
				sp, err := elfscan.ParseSpec(item)
				if err != nil {
					return sel, usagef("invalid --sites: %v", err)
				}
				sel.specs = append(sel.specs, sp)
			}
		}
	}
	return sel, nil
}

// splitList splits on commas outside brackets, so that a C++ name such as
// "f(int, int)" stays whole.
func splitList(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '(', '<', '[':
			depth++
		case ')', '>', ']':
			if depth > 0 {
				depth--
			}
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// parsePolicies parses --policy.
func parsePolicies(s string) ([]plan.Policy, error) {
	if s == "both" {
		return plan.Policies(), nil
	}
	p, err := plan.ParsePolicy(s)
	if err != nil {
		return nil, usagef("invalid --policy %q: want linux-uprobes, probeopt or both", s)
	}
	return []plan.Policy{p}, nil
}

// verdict is one policy's decision in the output.
type verdict struct {
	Strategy plan.Strategy `json:"strategy"`
	Reason   plan.Reason   `json:"reason"`
	Detail   string        `json:"detail"`
}

// siteResult is one line of output. Addresses and offsets are integers in
// JSON (virtual address and file offset).
type siteResult struct {
	File      string             `json:"file"`
	Kind      elfscan.SiteKind   `json:"kind"`
	Symbol    string             `json:"symbol"`
	Demangled string             `json:"demangled,omitempty"`
	SymOffset uint64             `json:"symbol_offset"`
	Provider  string             `json:"provider,omitempty"`
	Name      string             `json:"name,omitempty"`
	Args      string             `json:"args,omitempty"`
	Semaphore uint64             `json:"semaphore,omitempty"`
	SemOffset uint64             `json:"semaphore_offset,omitempty"`
	SiteInsn  elfscan.SiteInsn   `json:"site,omitempty"`
	Addr      uint64             `json:"addr"`
	Offset    uint64             `json:"offset"`
	Bytes     string             `json:"bytes"`
	Len       int                `json:"len"`
	Text      string             `json:"text"`
	Verdicts  map[string]verdict `json:"verdicts"`
	// SweepError is set when the function's linear sweep met bytes that do
	// not decode (at SweepStop, a virtual address).
	SweepError string `json:"sweep_error,omitempty"`
	SweepStop  uint64 `json:"sweep_stop,omitempty"`
	Error      string `json:"error,omitempty"`

	order int // USDT note order, to keep probes at one address in order
}

// fileReport is the result of scanning one file.
type fileReport struct {
	Path        string
	Arch        string
	Kind        string
	FuncSource  string
	Functions   int
	Undecodable int
	// UndecodableFuncs describes the first few functions whose sweep met
	// bytes that do not decode.
	UndecodableFuncs []string
	USDT             int
	Sites            []siteResult
	// Warnings are reported and change nothing (a spec that matches no
	// symbol); Errors are reported and make the exit status 1 (damaged USDT
	// notes), though the other sites are still listed.
	Warnings []string
	Errors   []string
}

// summary accumulates counts over every file.
type summary struct {
	Summary     bool                                  `json:"summary"`
	Files       int                                   `json:"files"`
	Skipped     int                                   `json:"skipped"`
	SkippedWhy  map[string]int                        `json:"skipped_by_reason"`
	Failed      int                                   `json:"failed"`
	Functions   int                                   `json:"functions"`
	Undecodable int                                   `json:"undecodable_functions"`
	Sites       int                                   `json:"sites"`
	Kinds       map[elfscan.SiteKind]int              `json:"kinds"`
	Strategies  map[plan.Policy]map[plan.Strategy]int `json:"strategies"`
	Reasons     map[plan.Policy]map[plan.Reason]int   `json:"reasons"`
	Seconds     float64                               `json:"seconds"`
	// Traps is set when the probeopt policy left trampolines out (--traps).
	Traps    bool `json:"traps,omitempty"`
	policies []plan.Policy
}

func newSummary(policies []plan.Policy) *summary {
	s := &summary{Summary: true, SkippedWhy: map[string]int{}, Kinds: map[elfscan.SiteKind]int{},
		Strategies: map[plan.Policy]map[plan.Strategy]int{}, Reasons: map[plan.Policy]map[plan.Reason]int{}, policies: policies}
	for _, p := range policies {
		s.Strategies[p] = map[plan.Strategy]int{}
		s.Reasons[p] = map[plan.Reason]int{}
	}
	return s
}

func (s *summary) add(rep *fileReport) {
	s.Files++
	s.Functions += rep.Functions
	s.Undecodable += rep.Undecodable
	for i := range rep.Sites {
		r := &rep.Sites[i]
		s.Sites++
		s.Kinds[r.Kind]++
		for p, v := range r.Verdicts {
			s.Strategies[plan.Policy(p)][v.Strategy]++
			s.Reasons[plan.Policy(p)][v.Reason]++
		}
	}
}

// scanner scans files with fixed settings.
type scanner struct {
	sel      siteSelector
	policies []plan.Policy
	vendor   decode.Vendor
	traps    bool // probeopt policy without trampolines
	text     bool // render instruction text (not needed for --summary)
}

func runScan(cmd *cobra.Command, o *scanOptions, args []string) error {
	sel, err := parseSites(o.sites)
	if err != nil {
		return err
	}
	policies, err := parsePolicies(o.policy)
	if err != nil {
		return err
	}
	if o.traps && !slices.Contains(policies, plan.Probeopt) {
		return usagef("--traps changes the probeopt policy, which --policy %s leaves out", o.policy)
	}
	if err := checkVendorName(o.vendor); err != nil {
		return err
	}
	vendor, err := parseVendor(o.vendor)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		args = sel.specPaths()
	}
	if len(args) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
		args = []string{exe}
	}
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	start := time.Now()
	sum := newSummary(policies)
	targets, walkErrs := expandPaths(args, sum.SkippedWhy)
	enc := json.NewEncoder(stdout)
	failed := 0
	fail := func(path string, err error) {
		failed++
		if o.json {
			enc.Encode(map[string]string{"file": path, "error": err.Error()})
		} else {
			fmt.Fprintf(stderr, "probeopt: scan %s: %v\n", path, err)
		}
	}
	for _, err := range walkErrs {
		var pe *os.PathError
		path := ""
		if errors.As(err, &pe) {
			path = pe.Path
		}
		fail(path, err)
	}
	sc := &scanner{sel: sel, policies: policies, vendor: vendor, traps: o.traps, text: !o.summary}
	sum.Traps = o.traps
	var prog *progress
	if len(targets) > 1 && isTerminal(stderr) {
		prog = newProgress(stderr, "scan", "files", len(targets))
	}
	for i, t := range targets {
		prog.update(i)
		rep, err := sc.scanFile(t.path)
		if err != nil {
			if why := skipReason(err); t.walked && why != "" {
				sum.SkippedWhy[why]++
				continue
			}
			fail(t.path, err)
			continue
		}
		sum.add(rep)
		for _, w := range rep.Warnings {
			if !o.json {
				fmt.Fprintf(stderr, "probeopt: scan %s: %s\n", t.path, w)
			}
		}
		for _, e := range rep.Errors {
			fail(t.path, errors.New(e))
		}
		if o.summary {
			continue
		}
		if o.json {
			for i := range rep.Sites {
				if err := enc.Encode(&rep.Sites[i]); err != nil {
					return fmt.Errorf("write JSON: %w", err)
				}
			}
		} else if err := printFileTable(stdout, rep, policies); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	prog.done()
	if sum.Files == 0 && failed == 0 {
		// Every argument was a directory and none held a file to scan.
		why := "it holds no regular files"
		if n := skipCounts(sum.SkippedWhy).total(); n > 0 {
			why = fmt.Sprintf("%s skipped: %s", plural(n, "file"), skipCounts(sum.SkippedWhy))
		}
		fail(strings.Join(args, ", "), fmt.Errorf("%w (%s)", errNothingToScan, why))
	}
	sum.Failed = failed
	sum.Skipped = skipCounts(sum.SkippedWhy).total()
	sum.Seconds = time.Since(start).Seconds()
	if o.json {
		if err := enc.Encode(sum); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
	} else if err := printSummary(stdout, sum); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

// errNothingToScan means the directories given to scan held no x86-64 or
// arm64 ELF64 file.
var errNothingToScan = errors.New("no file to scan: none is an x86-64 or arm64 ELF64 file")

// semaphoreNeedsPID says why a USDT probe with a semaphore needs a pid.
const semaphoreNeedsPID = "the probe runs only once a tracer raises its semaphore in the running process; enabling it needs a pid"

// semaphoreNote returns a note naming the USDT sites that have a semaphore,
// or "" when none has.
func semaphoreNote(sites []siteResult) string {
	var names []string
	n := 0
	for i := range sites {
		r := &sites[i]
		if r.Kind != elfscan.SiteUSDT || r.Semaphore == 0 {
			continue
		}
		if n++; n <= maxListed {
			names = append(names, r.Provider+":"+r.Name)
		}
	}
	if n == 0 {
		return ""
	}
	list := strings.Join(names, ", ")
	if n > maxListed {
		list += ", ..."
	}
	if n == 1 {
		return fmt.Sprintf("USDT probe %s has a semaphore: %s", list, semaphoreNeedsPID)
	}
	return fmt.Sprintf("%d USDT probes have a semaphore (%s): such probes run only once a tracer raises their semaphore in the running process; enabling them needs a pid", n, list)
}

// funcSites holds the sites that fall in one function.
type funcSites struct {
	idx []int // indexes into the site list
}

// scanFile scans one file: it finds the sites, sweeps every function (on
// every CPU, a chunk of functions per goroutine) and decides each site.
func (sc *scanner) scanFile(path string) (*fileReport, error) {
	f, err := elfscan.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pf := plan.NewFile(f, &plan.FileOptions{Vendor: sc.vendor})
	rep := &fileReport{Path: path, Arch: f.Arch.String(), Kind: f.Kind()}
	funcs, err := f.Funcs()
	switch {
	case errors.Is(err, elfscan.ErrNoFunctions):
		rep.Warnings = append(rep.Warnings, "no function symbols: only USDT sites and addresses can be planned")
	case err != nil:
		return nil, err
	}
	rep.Functions = len(funcs)
	rep.FuncSource = f.FuncSource()

	sites, warnings, errs, err := sc.gatherSites(f)
	if err != nil {
		return nil, err
	}
	rep.Warnings = append(rep.Warnings, warnings...)
	rep.Errors = errs
	if probes, err := f.USDT(); err == nil {
		rep.USDT = len(probes)
	}

	// Sites by function: sites[i].Func points into funcs.
	byFunc := make([]funcSites, len(funcs))
	var loose []int
	for i := range sites {
		fn := sites[i].Func
		if fn == nil {
			loose = append(loose, i)
			continue
		}
		fi := sort.Search(len(funcs), func(j int) bool { return funcs[j].Addr >= fn.Addr })
		byFunc[fi].idx = append(byFunc[fi].idx, i)
	}

	results := make([]siteResult, len(sites))
	chunks := chunkFuncs(funcs, runtime.GOMAXPROCS(0)*8)
	extra := make([][]siteResult, len(chunks))
	var undecodable atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < runtime.GOMAXPROCS(0); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c := int(next.Add(1) - 1)
				if c >= len(chunks) {
					return
				}
				for fi := chunks[c][0]; fi < chunks[c][1]; fi++ {
					fn := &funcs[fi]
					// Each function is swept once: the sweep is
					// not kept past its sites.
					an := pf.Analyze(fn)
					if an != nil && an.Err != nil && !fn.PLT {
						if undecodable.Add(1) <= maxListed {
							mu.Lock()
							rep.UndecodableFuncs = append(rep.UndecodableFuncs, fmt.Sprintf("%s at %#x: %v", fn.Name, an.Addr+uint64(an.Decoded), an.Err))
							mu.Unlock()
						}
					}
					for _, i := range byFunc[fi].idx {
						results[i] = sc.decide(pf, &sites[i], an)
					}
					if sc.sel.all && an != nil && !fn.PLT {
						extra[c] = append(extra[c], sc.allSites(pf, fn, an)...)
					}
				}
			}
		}()
	}
	for _, i := range loose {
		results[i] = sc.decide(pf, &sites[i], nil)
	}
	wg.Wait()
	rep.Undecodable = int(undecodable.Load())
	sort.Strings(rep.UndecodableFuncs)
	for _, e := range extra {
		results = append(results, e...)
	}
	sort.SliceStable(results, func(i, j int) bool {
		a, b := &results[i], &results[j]
		if a.Addr != b.Addr {
			return a.Addr < b.Addr
		}
		return a.order < b.order
	})
	rep.Sites = results
	return rep, nil
}

// maxListed is how many undecodable functions a report names.
const maxListed = 10

// chunkFuncs splits the functions into about n ranges of similar byte size.
func chunkFuncs(funcs []elfscan.Func, n int) [][2]int {
	var total uint64
	for i := range funcs {
		total += funcs[i].End - funcs[i].Addr
	}
	per := total/uint64(max(n, 1)) + 1
	var out [][2]int
	start := 0
	var acc uint64
	for i := range funcs {
		acc += funcs[i].End - funcs[i].Addr
		if acc >= per || i-start >= 4096 {
			out = append(out, [2]int{start, i + 1})
			start, acc = i+1, 0
		}
	}
	if start < len(funcs) {
		out = append(out, [2]int{start, len(funcs)})
	}
	return out
}

// gatherSites lists the sites the selector names in f, without duplicates.
// It returns warnings (specs that match nothing) and errors (damaged USDT
// notes) besides the sites it could find.
func (sc *scanner) gatherSites(f *elfscan.File) (sites []elfscan.Site, warnings, errs []string, err error) {
	if sc.sel.entries && !sc.sel.all {
		s, err := f.EntrySites()
		if err != nil && !errors.Is(err, elfscan.ErrNoFunctions) {
			return nil, nil, nil, err
		}
		sites = append(sites, s...)
	}
	if sc.sel.usdt {
		s, err := f.USDTSites()
		if err != nil {
			errs = append(errs, fmt.Sprintf("USDT notes: %v", err))
		}
		sites = append(sites, s...)
	}
	for _, sp := range sc.sel.specs {
		if sp.Path != "" && !elfscan.SamePath(sp.Path, f.Path) {
			continue
		}
		s, err := f.Resolve(sp)
		switch {
		case errors.Is(err, elfscan.ErrNoSymbol) || errors.Is(err, elfscan.ErrBadSpec):
			warnings = append(warnings, err.Error())
			continue
		case err != nil:
			errs = append(errs, err.Error())
			continue
		}
		sites = append(sites, s...)
	}
	// Drop duplicates: the same kind of site at the same address (and the
	// same USDT probe).
	type key struct {
		kind elfscan.SiteKind
		addr uint64
		usdt *elfscan.USDTProbe
	}
	seen := map[key]bool{}
	out := sites[:0]
	for _, s := range sites {
		k := key{s.Kind, s.Addr, s.USDT}
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out, warnings, errs, nil
}

// allSites decides every instruction of a swept function.
func (sc *scanner) allSites(pf *plan.File, fn *elfscan.Func, an *plan.Function) []siteResult {
	f := pf.ELF()
	var out []siteResult
	for addr := range an.Starts() {
		kind := elfscan.SiteInst
		if addr == fn.Addr {
			kind = elfscan.SiteEntry
		}
		site := elfscan.Site{Kind: kind, Addr: addr, Func: fn}
		site.Offset, site.OffsetErr = f.TextOffset(addr)
		out = append(out, sc.decide(pf, &site, an))
	}
	return out
}

// decide plans one site under every policy; an is the sweep of its
// function (nil when none is known).
func (sc *scanner) decide(pf *plan.File, s *elfscan.Site, an *plan.Function) siteResult {
	f := pf.ELF()
	r := siteResult{File: f.Path, Kind: s.Kind, Addr: s.Addr, Offset: s.Offset, Verdicts: map[string]verdict{}}
	if fn := s.Func; fn != nil {
		r.Symbol, r.SymOffset = fn.Name, s.Addr-fn.Addr
		if sc.text {
			r.Demangled = fn.Demangled()
		}
	}
	if p := s.USDT; p != nil {
		r.Provider, r.Name, r.Args, r.SiteInsn = p.Provider, p.Name, p.Args, p.Site
		r.Semaphore, r.SemOffset = p.SemaphoreAddr, p.SemaphoreOffset
		r.order = 1
	}
	if s.OffsetErr != nil {
		r.Error = s.OffsetErr.Error()
	}
	if an != nil && an.Err != nil {
		r.SweepError, r.SweepStop = an.Err.Error(), an.Addr+uint64(an.Decoded)
	}
	site, err := pf.SiteWith(s, an)
	if err != nil {
		r.Error = err.Error()
	}
	code := site.Code
	opts := &plan.Options{Vendor: sc.vendor, NoTrampolines: sc.traps}
	for _, p := range sc.policies {
		d := plan.Decide(p, site, opts)
		r.Verdicts[string(p)] = verdict{Strategy: d.Strategy, Reason: d.Reason, Detail: d.Detail}
	}
	r.Len, r.Text = instText(f.Arch, sc.vendor, s.Addr, code, sc.text)
	n := r.Len
	if n == 0 { // undecodable: show what is there, for a report
		n = min(len(code), 15)
	}
	r.Bytes = hex.EncodeToString(code[:n])
	return r
}

// instText returns the length of the instruction at the start of code and,
// when text is set, its assembly text.
func instText(arch decode.Arch, vendor decode.Vendor, addr uint64, code []byte, text bool) (int, string) {
	if arch == decode.ARM64 {
		inst, err := decode.DecodeARM64(code, addr)
		if err != nil {
			return 0, "(bad)"
		}
		if !text {
			return inst.Len, ""
		}
		return inst.Len, inst.Text() // safe for concurrent use (decode serializes arm64asm)
	}
	var inst decode.X86Inst
	if err := (decode.X86Decoder{Vendor: vendor}).Decode(code, addr, &inst); err != nil {
		return 0, "(bad)"
	}
	if !text {
		return inst.Len, ""
	}
	return inst.Len, inst.Text("gnu")
}

// symbolColumn is the SYMBOL cell of a site: the function (demangled) and
// the offset into it, or PROVIDER:NAME for a USDT probe.
func symbolColumn(r *siteResult) string {
	if r.Kind == elfscan.SiteUSDT {
		return r.Provider + ":" + r.Name
	}
	name := r.Demangled
	if name == "" {
		name = r.Symbol
	}
	if name == "" {
		return "-"
	}
	const maxLen = 60
	if len(name) > maxLen {
		name = name[:maxLen-3] + "..."
	}
	if r.SymOffset != 0 {
		name += fmt.Sprintf("+%#x", r.SymOffset)
	}
	return name
}

// printFileTable prints the sites of one file.
func printFileTable(w io.Writer, rep *fileReport, policies []plan.Policy) error {
	fmt.Fprintf(w, "%s: %s %s, %d functions (%s), %d USDT probes, %d sites\n",
		rep.Path, rep.Arch, rep.Kind, rep.Functions, orNone(rep.FuncSource), rep.USDT, len(rep.Sites))
	if len(rep.Sites) == 0 {
		fmt.Fprintln(w)
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprint(tw, "  ADDRESS\tKIND\tSYMBOL\tINSTRUCTION\tLEN")
	for _, p := range policies {
		fmt.Fprintf(tw, "\t%s\tREASON", strings.ToUpper(string(p)))
	}
	fmt.Fprintln(tw)
	for i := range rep.Sites {
		r := &rep.Sites[i]
		text := r.Text
		if r.Error != "" && r.Len == 0 {
			text = "(" + r.Error + ")"
		}
		fmt.Fprintf(tw, "  %#x\t%s\t%s\t%s\t%d", r.Addr, r.Kind, symbolColumn(r), text, r.Len)
		for _, p := range policies {
			v := r.Verdicts[string(p)]
			fmt.Fprintf(tw, "\t%s\t%s", v.Strategy, v.Reason)
		}
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if n := semaphoreNote(rep.Sites); n != "" {
		fmt.Fprintf(w, "  %s\n", n)
	}
	if rep.Undecodable > 0 {
		fmt.Fprintf(w, "  %s whose sweep met bytes that do not decode (probeopt rejects their sites past that point):\n", plural(rep.Undecodable, "function"))
		for _, u := range rep.UndecodableFuncs {
			fmt.Fprintf(w, "    %s\n", u)
		}
	}
	_, err := fmt.Fprintln(w)
	return err
}

func orNone(s string) string {
	if s == "" || s == "none" {
		return "no symbols"
	}
	return "from " + s
}

// printSummary prints the counts over every file.
func printSummary(w io.Writer, s *summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	skipped := ""
	if s.Skipped > 0 {
		skipped = " (" + skipCounts(s.SkippedWhy).String() + ")"
	}
	fmt.Fprintf(tw, "files\t%d scanned, %d skipped%s, %d failed\n", s.Files, s.Skipped, skipped, s.Failed)
	fmt.Fprintf(tw, "functions\t%d, %d whose sweep met bytes that do not decode\n", s.Functions, s.Undecodable)
	var kinds []string
	for _, k := range []elfscan.SiteKind{elfscan.SiteEntry, elfscan.SiteUSDT, elfscan.SiteInst} {
		if n := s.Kinds[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(kinds) > 0 {
		fmt.Fprintf(tw, "sites\t%d (%s)\n", s.Sites, strings.Join(kinds, ", "))
	} else {
		fmt.Fprintf(tw, "sites\t0\n")
	}
	if s.Traps {
		fmt.Fprintf(tw, "trampolines\tleft out of the probeopt policy (--traps)\n")
	}
	fmt.Fprintf(tw, "time\t%s\n", time.Duration(s.Seconds*float64(time.Second)).Round(time.Millisecond))
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.Sites == 0 {
		return nil
	}
	fmt.Fprintf(w, "\n%-18s", "strategy")
	for _, p := range s.policies {
		fmt.Fprintf(w, "%18s", p)
	}
	fmt.Fprintln(w)
	for _, st := range plan.Strategies() {
		fmt.Fprintf(w, "%-18s", st)
		for _, p := range s.policies {
			n := s.Strategies[p][st]
			fmt.Fprintf(w, "%10d %7s", n, percent(n, s.Sites))
		}
		fmt.Fprintln(w)
	}
	for _, p := range s.policies {
		fmt.Fprintf(w, "\nreasons (%s):\n", p)
		counts := sortedCounts(s.Reasons[p])
		width := 0
		for _, e := range counts {
			width = max(width, len(e.name))
		}
		for _, e := range counts {
			if _, err := fmt.Fprintf(w, "  %-*s %9d %7s\n", width, e.name, e.count, percent(e.count, s.Sites)); err != nil {
				return err
			}
		}
	}
	return nil
}

type countEntry struct {
	name  string
	count int
}

// sortedCounts orders counts by decreasing count, then name.
func sortedCounts[K ~string](m map[K]int) []countEntry {
	out := make([]countEntry, 0, len(m))
	for k, v := range m {
		out = append(out, countEntry{string(k), v})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].count != out[j].count {
			return out[i].count > out[j].count
		}
		return out[i].name < out[j].name
	})
	return out
}

func percent(n, total int) string {
	if total == 0 {
		return "0.0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(total))
}
