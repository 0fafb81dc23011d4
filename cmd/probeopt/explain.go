package main

import (
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
)

type explainOptions struct {
	json   bool
	vendor string
	limit  int
}

func newExplainCmd() *cobra.Command {
	var o explainOptions
	cmd := &cobra.Command{
		Use:   "explain [PATH] SPEC",
		Short: "Explain how one probe site would be probed, rule by rule",
		Long: `Show one probe site in depth: the file and function it is in, its bytes and
every field the decoder found, the instruction-boundary check (the function
decoded linearly from its start), the USDT note when it is a USDT probe, and
for each policy (linux-uprobes, probeopt) the decision with every rule that
applied, in order.

SPEC is SYM, SYM+OFF, 0xADDR, usdt:PROVIDER:NAME (globs allowed), or a
bpftrace form with the path in it (uprobe:PATH:SYM, usdt:PATH:PROVIDER:NAME),
in which case PATH may be left out. A spec that matches several sites
explains the first --limit of them.

With --json each site is one JSON object on its own line, with the fields of
scan --json plus "function", "usdt", "boundary" and, per policy, the rules.

A spec that matches nothing fails with the closest names the file has ("did
you mean main?"). A site inside an instruction is explained, with a warning
on stderr; an address that no executable segment holds is reported on
stderr and makes the exit status 1. A USDT probe with a semaphore is marked:
enabling it needs a running process (a pid).`,
		Example: `  probeopt explain ./a.out main
  probeopt explain ./a.out 'parse+0x14'
  probeopt explain /usr/bin/python3.11 usdt:python:function__entry
  probeopt explain uprobe:/bin/bash:readline`,
		Args: argsRange(1, 2, "PATH and SPEC"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runExplain(cmd, &o, args)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print one JSON object per site, one per line")
	f.StringVar(&o.vendor, "vendor", "amd", "follow `VENDOR` where x86-64 CPUs decode differently (probeopt policy): amd, intel, or host")
	f.IntVar(&o.limit, "limit", 5, "explain at most `N` sites when the spec matches several")
	return cmd
}

// explained is the JSON form of one explained site.
type explained struct {
	siteResult
	Function *explainedFunc           `json:"function,omitempty"`
	USDT     *explainedUSDT           `json:"usdt,omitempty"`
	Boundary string                   `json:"boundary"`
	Rules    map[string][]plan.Rule   `json:"rules"`
	Fields   []field                  `json:"-"`
	Decoded  map[string]string        `json:"decoded,omitempty"`
	decision map[string]plan.Decision `json:"-"`
	// inside is set when the address lies inside the instruction that
	// starts at insideStart; codeErr when the file has no code there.
	inside      bool
	insideStart uint64
	codeErr     error
}

type explainedFunc struct {
	Name         string   `json:"name"`
	Demangled    string   `json:"demangled,omitempty"`
	Aliases      []string `json:"aliases,omitempty"`
	Addr         uint64   `json:"addr"`
	Size         uint64   `json:"size"`
	Bind         string   `json:"bind"`
	Source       string   `json:"source"`
	Instructions int      `json:"instructions"`
	Decoded      int      `json:"bytes_decoded"`
	Error        string   `json:"sweep_error,omitempty"`
}

type explainedUSDT struct {
	Location  uint64            `json:"location"`
	Base      uint64            `json:"base"`
	Semaphore uint64            `json:"semaphore"`
	Args      []elfscan.USDTArg `json:"arguments"`
	ArgsError string            `json:"arguments_error,omitempty"`
	// NeedsPID is set for a probe with a semaphore: it can be enabled
	// only in a running process.
	NeedsPID bool `json:"needs_pid,omitempty"`
}

func runExplain(cmd *cobra.Command, o *explainOptions, args []string) error {
	if o.limit < 1 {
		return usagef("invalid --limit %d: want at least 1", o.limit)
	}
	if err := checkVendorName(o.vendor); err != nil {
		return err
	}
	specText := args[len(args)-1]
	sp, err := elfscan.ParseSpec(specText)
	if err != nil {
		return usagef("%v", err)
	}
	path := sp.Path
	if len(args) == 2 {
		path = args[0]
	}
	if path == "" {
		return usagef("explain: missing PATH (give it, or use a spec with a path such as uprobe:/path:SYM)")
	}
	vendor, err := parseVendor(o.vendor)
	if err != nil {
		return err
	}
	f, err := elfscan.Open(path)
	if err != nil {
		return fmt.Errorf("explain %s: %w", path, err)
	}
	defer f.Close()
	sites, err := f.Resolve(sp)
	if err != nil {
		return fmt.Errorf("explain %s: %w", path, err)
	}
	out := cmd.OutOrStdout()
	sc := &scanner{policies: plan.Policies(), vendor: vendor, text: true}
	pf := plan.NewFile(f, &plan.FileOptions{Vendor: vendor})
	stderr := cmd.ErrOrStderr()
	failed := false
	for i := range sites {
		if i == o.limit {
			fmt.Fprintf(stderr, "probeopt: explain: %s matches %d sites; showing the first %d (--limit)\n", specText, len(sites), o.limit)
			break
		}
		if err := checkCode(f, path, sites[i].Addr); err != nil {
			failed = true
			if o.json {
				if err := json.NewEncoder(out).Encode(explainFailure{File: path, Spec: specText, Addr: sites[i].Addr, Error: err.Error()}); err != nil {
					return fmt.Errorf("write JSON: %w", err)
				}
			}
			fmt.Fprintf(stderr, "probeopt: explain %s: %v\n", specText, err)
			continue
		}
		e := sc.explain(pf, &sites[i])
		if e.inside {
			fmt.Fprintf(stderr, "probeopt: explain %s: %#x is inside the instruction at %#x, not at an instruction start: probeopt rejects a probe there\n", specText, e.Addr, e.insideStart)
		}
		if e.codeErr != nil {
			fmt.Fprintf(stderr, "probeopt: explain %s: %v\n", specText, e.codeErr)
			failed = true
		}
		if o.json {
			if err := json.NewEncoder(out).Encode(e); err != nil {
				return fmt.Errorf("write JSON: %w", err)
			}
			continue
		}
		if i > 0 {
			fmt.Fprintln(out)
		}
		if err := printExplained(out, e); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	}
	if failed {
		return errReported
	}
	return nil
}

// explain gathers everything about one site.
func (sc *scanner) explain(pf *plan.File, s *elfscan.Site) *explained {
	f := pf.ELF()
	var an *plan.Function
	e := &explained{Rules: map[string][]plan.Rule{}, decision: map[string]plan.Decision{}}
	if fn := s.Func; fn != nil {
		an = pf.Function(fn)
		ef := &explainedFunc{Name: fn.Name, Demangled: fn.Demangled(), Aliases: fn.Aliases, Addr: fn.Addr, Size: fn.End - fn.Addr,
			Bind: strings.TrimPrefix(fn.Bind.String(), "STB_"), Source: fn.Sources.String()}
		if an != nil {
			ef.Instructions, ef.Decoded = an.Instructions, an.Decoded
			if an.Err != nil {
				ef.Error = an.Err.Error()
			}
		}
		e.Function = ef
	}
	e.siteResult = sc.decide(pf, s, an)
	if p := s.USDT; p != nil {
		eu := &explainedUSDT{Location: p.Location, Base: p.Base, Semaphore: p.Semaphore, Args: p.Arguments, NeedsPID: p.SemaphoreAddr != 0}
		if p.ArgsErr != nil {
			eu.ArgsError = p.ArgsErr.Error()
		}
		e.USDT = eu
	}
	e.Boundary = boundaryText(s, an)
	if an != nil {
		if ok, known, start := an.Boundary(s.Addr); known && !ok {
			e.inside, e.insideStart = true, start
		}
	}
	site, codeErr := pf.SiteWith(s, an)
	e.codeErr = codeErr
	code := site.Code
	for _, p := range sc.policies {
		d := plan.Decide(p, site, &plan.Options{Vendor: sc.vendor, Rules: true})
		e.Rules[string(p)] = d.Rules
		e.decision[string(p)] = d
	}
	e.Fields = decodedFields(f.Arch, sc.vendor, s.Addr, code)
	e.Decoded = map[string]string{}
	for _, fl := range e.Fields {
		e.Decoded[fl.name] = fl.value
	}
	return e
}

// boundaryText describes the instruction-boundary check.
func boundaryText(s *elfscan.Site, an *plan.Function) string {
	switch {
	case an == nil && s.Kind == elfscan.SiteUSDT:
		return "no function holds the address; the USDT note marks an instruction start"
	case an == nil:
		return "no function holds the address: the boundary cannot be checked"
	}
	ok, known, start := an.Boundary(s.Addr)
	switch {
	case ok:
		return fmt.Sprintf("an instruction starts here: decoding from the function start %#x lands on it", an.Addr)
	case known:
		return fmt.Sprintf("inside the instruction at %#x (decoding from the function start %#x)", start, an.Addr)
	case an.Err != nil:
		return fmt.Sprintf("unknown: the sweep stopped at %#x (%v)", an.Addr+uint64(an.Decoded), an.Err)
	}
	return "unknown: the address is outside the function"
}

// decodedFields describes the instruction at the start of code the way the
// decode command does.
func decodedFields(arch decode.Arch, vendor decode.Vendor, addr uint64, code []byte) []field {
	if arch == decode.ARM64 {
		a, err := decodeARM64(code, addr, true)
		if err != nil {
			return []field{{"error", err.Error()}}
		}
		return newARM64Fields(&a).lines()
	}
	var inst decode.X86Inst
	if err := (decode.X86Decoder{Vendor: vendor}).Decode(code, addr, &inst); err != nil {
		return []field{{"error", err.Error()}}
	}
	return newX86Fields(&inst, vendor).lines()
}

func printExplained(w io.Writer, e *explained) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	what := string(e.Kind)
	if e.Kind == elfscan.SiteUSDT {
		what = "usdt " + e.Provider + ":" + e.Name
	}
	fmt.Fprintf(tw, "site\t%s at %#x (file offset %#x) in %s\n", what, e.Addr, e.Offset, e.File)
	if e.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", e.Error)
	}
	if fn := e.Function; fn != nil {
		name := fn.Name
		if fn.Demangled != "" {
			name += " (" + fn.Demangled + ")"
		}
		fmt.Fprintf(tw, "function\t%s +%#x\n", name, e.SymOffset)
		if len(fn.Aliases) > 0 {
			fmt.Fprintf(tw, "aliases\t%s\n", strings.Join(fn.Aliases, ", "))
		}
		sweep := fmt.Sprintf("%d instructions, all %d bytes decode", fn.Instructions, fn.Size)
		if fn.Error != "" {
			sweep = fmt.Sprintf("%d instructions, the sweep stops after %d of %d bytes: %s", fn.Instructions, fn.Decoded, fn.Size, fn.Error)
		}
		fmt.Fprintf(tw, "\t%#x-%#x, %d bytes, %s, from %s; %s\n", fn.Addr, fn.Addr+fn.Size, fn.Size, strings.ToLower(fn.Bind), fn.Source, sweep)
	}
	if u := e.USDT; u != nil {
		fmt.Fprintf(tw, "usdt\tnote location %#x, base %#x, semaphore %#x", u.Location, u.Base, u.Semaphore)
		if e.SemOffset != 0 {
			fmt.Fprintf(tw, " (file offset %#x)", e.SemOffset)
		}
		fmt.Fprintf(tw, "; site %s\n", e.SiteInsn)
		if u.NeedsPID {
			fmt.Fprintf(tw, "\t%s\n", semaphoreNeedsPID)
		}
		fmt.Fprintf(tw, "arguments\t%s\n", orDash(e.Args))
		if u.ArgsError != "" {
			fmt.Fprintf(tw, "\t%s\n", u.ArgsError)
		}
		for i, a := range u.Args {
			fmt.Fprintf(tw, "\t%d: %s\n", i+1, describeArg(a))
		}
	}
	b, _ := hex.DecodeString(e.Bytes)
	fmt.Fprintf(tw, "bytes\t%s\n", spacedHex(b))
	fmt.Fprintf(tw, "instruction\t%s (%s)\n", e.Text, plural(e.Len, "byte"))
	for _, fl := range e.Fields {
		fmt.Fprintf(tw, "    %s\t%s\n", fl.name, fl.value)
	}
	fmt.Fprintf(tw, "boundary\t%s\n", e.Boundary)
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range plan.Policies() {
		d, ok := e.decision[string(p)]
		if !ok {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s (%s)\n  %s\n", p, d.Strategy, d.Reason, d.Detail)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, r := range d.Rules {
			fmt.Fprintf(tw, "    %s\t%s\t%s\n", r.Name, r.Outcome, r.Detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// describeArg renders a parsed USDT argument.
func describeArg(a elfscan.USDTArg) string {
	size := "size unknown"
	if a.Size > 0 {
		sign := "unsigned"
		if a.Signed {
			sign = "signed"
		}
		size = fmt.Sprintf("%s %d-byte", sign, a.Size)
	}
	switch a.Kind {
	case elfscan.ArgConst:
		return fmt.Sprintf("%s constant %d", size, a.Value)
	case elfscan.ArgReg:
		return fmt.Sprintf("%s value in register %s", size, a.Reg)
	}
	var addr []string
	if a.Segment != "" {
		addr = append(addr, a.Segment+" base")
	}
	if a.Symbol != "" {
		addr = append(addr, "symbol "+a.Symbol)
	}
	if a.Reg != "" {
		addr = append(addr, a.Reg)
	}
	if a.Index != "" {
		addr = append(addr, fmt.Sprintf("%s*%d", a.Index, a.Scale))
	}
	if a.Value != 0 || len(addr) == 0 {
		addr = append(addr, fmt.Sprintf("%d", a.Value))
	}
	return fmt.Sprintf("%s value in memory at %s", size, strings.Join(addr, " + "))
}

// explainFailure is the JSON form of a site that cannot be explained.
type explainFailure struct {
	File  string `json:"file"`
	Spec  string `json:"spec"`
	Addr  uint64 `json:"addr"`
	Error string `json:"error"`
}

// notCodeError reports a probe address at which the file holds no code: no
// executable loadable segment maps it from the file. It wraps
// elfscan.ErrNotMapped.
type notCodeError struct {
	Addr uint64 // the probe address (virtual)
	Path string // the file
	// In is the loadable segment whose memory image holds Addr, if any.
	In *elfscan.Segment
	// Exec are the file's executable loadable segments.
	Exec []elfscan.Segment
}

func (e *notCodeError) Error() string {
	var where string
	switch {
	case e.In == nil:
		where = "no PT_LOAD segment maps it"
	case e.In.Exec():
		where = fmt.Sprintf("it is in the zero-filled tail of the executable PT_LOAD segment at %s, which the file does not hold", segmentRange(e.In.Vaddr, e.In.Memsz))
	default:
		where = fmt.Sprintf("it is in a PT_LOAD segment that is not executable (%s, %s)", segmentRange(e.In.Vaddr, e.In.Memsz), segmentFlags(e.In.Flags))
	}
	if len(e.Exec) == 0 {
		return fmt.Sprintf("%#x is not in the executable code of %s: %s; the file has no executable PT_LOAD segment", e.Addr, e.Path, where)
	}
	ranges := make([]string, len(e.Exec))
	for i, s := range e.Exec {
		ranges[i] = segmentRange(s.Vaddr, s.Filesz)
	}
	return fmt.Sprintf("%#x is not in the executable code of %s: %s; the executable code is at %s", e.Addr, e.Path, where, strings.Join(ranges, ", "))
}

func (e *notCodeError) Unwrap() error { return elfscan.ErrNotMapped }

// segmentRange formats the addresses [start, start+size).
func segmentRange(start, size uint64) string {
	return fmt.Sprintf("[%#x, %#x)", start, start+size)
}

// segmentFlags formats segment permissions as readelf does: R, RW, R E.
func segmentFlags(fl elf.ProgFlag) string {
	b := []byte("   ")
	for i, f := range []struct {
		flag elf.ProgFlag
		c    byte
	}{{elf.PF_R, 'R'}, {elf.PF_W, 'W'}, {elf.PF_X, 'E'}} {
		if fl&f.flag != 0 {
			b[i] = f.c
		}
	}
	return strings.TrimSpace(string(b))
}

// checkCode returns a *notCodeError when the file at path holds no code at
// addr (see notCodeError), and nil when it does.
func checkCode(f *elfscan.File, path string, addr uint64) error {
	_, err := f.Code(addr, 1)
	if err == nil {
		return nil
	}
	if !errors.Is(err, elfscan.ErrNotMapped) {
		return err
	}
	e := &notCodeError{Addr: addr, Path: path}
	for i := range f.Segments {
		s := &f.Segments[i]
		if s.Exec() {
			e.Exec = append(e.Exec, *s)
		}
		if e.In == nil && addr >= s.Vaddr && addr-s.Vaddr < s.Memsz {
			e.In = s
		}
	}
	return e
}
