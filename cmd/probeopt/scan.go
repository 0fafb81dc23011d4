package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/decode"
)

type scanOptions struct {
	json   bool
	limit  int
	top    int
	vendor string
}

func newScanCmd() *cobra.Command {
	var o scanOptions
	cmd := &cobra.Command{
		Use:   "scan [PATH]",
		Short: "Decode every function of an ELF file and summarize",
		Long: `Open an ELF64 little-endian file for x86-64 or arm64, take the function
symbols of its executable sections (from .symtab; from .dynsym when the file
is stripped; from the Go function table of a stripped Go binary), decode each
function linearly from its start to its size, and print a summary: functions,
instructions, bytes, the functions whose sweep met bytes that do not decode
(with the first few of them and the error), the most common first
instructions and their branch kinds, and the time taken.

Without PATH, scan reads probeopt's own executable. A file that is not ELF,
is 32-bit or big-endian, is for another machine, is truncated or has no
function symbols is an error (exit status 1). Functions that do not decode are
part of the report, not an error.

This is a preliminary scan: the probe planner (which strategy each site
gets, and why) comes later.`,
		Example: `  probeopt scan
  probeopt scan ./a.out
  probeopt scan --json --limit 20 libfoo.so`,
		Args: argsRange(0, 1, "PATH"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runScan(cmd, &o, args)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print the summary as one JSON object")
	f.IntVar(&o.limit, "limit", 5, "list at most `N` functions that do not decode (-1: all)")
	f.IntVar(&o.top, "top", 10, "show the `N` most common first mnemonics and branch kinds")
	f.StringVar(&o.vendor, "vendor", "amd", "follow `VENDOR` where x86-64 CPUs decode differently: amd, intel, or host")
	return cmd
}

// scanReport is the summary of one scan; it is also the JSON output.
type scanReport struct {
	Path         string `json:"path"`
	Arch         string `json:"arch"`
	Symbols      string `json:"symbols"` // where the functions came from: .symtab, .dynsym or .gopclntab
	Functions    int    `json:"functions"`
	Aliases      int    `json:"aliases"` // function symbols at an address already counted
	Instructions int    `json:"instructions"`
	Bytes        uint64 `json:"bytes"`         // bytes of all functions
	BytesDecoded uint64 `json:"bytes_decoded"` // bytes covered by decoded instructions
	// UndecodableFuncs counts the functions whose sweep stopped at bytes
	// that do not decode; Undecodable lists the first --limit of them.
	UndecodableFuncs int              `json:"undecodable_functions"`
	Undecodable      []undecodable    `json:"undecodable"`
	FirstMnemonics   []histogramEntry `json:"first_mnemonics"`
	FirstBranches    []histogramEntry `json:"first_branch_kinds"`
	Seconds          float64          `json:"seconds"`

	errCounts map[string]int
}

// undecodable is one function whose sweep failed.
type undecodable struct {
	Name   string `json:"name"`
	Addr   string `json:"addr"`   // function start
	Offset uint64 `json:"offset"` // where decoding failed, from the function start
	Bytes  string `json:"bytes"`  // up to 15 bytes from there, hex
	Error  string `json:"error"`
}

type histogramEntry struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func runScan(cmd *cobra.Command, o *scanOptions, args []string) error {
	if o.limit < -1 {
		return usagef("invalid --limit %d: want a count, or -1 for all", o.limit)
	}
	if o.top < 0 {
		return usagef("invalid --top %d: want a count", o.top)
	}
	if err := checkVendorName(o.vendor); err != nil {
		return err
	}
	var err error
	path := ""
	if len(args) == 1 {
		path = args[0]
	} else {
		path, err = os.Executable()
		if err != nil {
			return fmt.Errorf("find own executable: %w", err)
		}
	}
	img, err := openELF(path)
	if err != nil {
		return fmt.Errorf("scan %s: %w", path, err)
	}
	defer img.Close()
	var dec decode.X86Decoder
	if img.Arch == decode.X86_64 {
		if dec.Vendor, err = parseVendor(o.vendor); err != nil {
			return err
		}
	}

	var prog *progress
	if isTerminal(cmd.ErrOrStderr()) && !o.json {
		prog = newProgress(cmd.ErrOrStderr(), "scan", len(img.Funcs))
	}
	rep, err := sweep(img, dec, o.limit, prog)
	prog.done()
	if err != nil {
		return fmt.Errorf("scan %s: %w", path, err)
	}
	if o.json {
		rep.FirstMnemonics = topN(rep.FirstMnemonics, -1)
		rep.FirstBranches = topN(rep.FirstBranches, -1)
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	if err := printScanHuman(cmd.OutOrStdout(), rep, o.top, o.limit); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// firstInfo describes the first instruction of a function, for the
// histograms.
type firstInfo struct {
	mnemonic string
	branch   decode.BranchKind
}

// decodeFunc decodes one instruction of b at addr and returns its length;
// when first is set it also describes it.
type decodeFunc func(b []byte, addr uint64, first bool) (int, firstInfo, error)

// sweeper returns the instruction decoder for the image's architecture.
func sweeper(arch decode.Arch, dec decode.X86Decoder) decodeFunc {
	if arch == decode.ARM64 {
		return func(b []byte, addr uint64, first bool) (int, firstInfo, error) {
			a, err := decodeARM64(b, addr, first)
			if err != nil {
				return 0, firstInfo{}, err
			}
			return a.Len, firstInfo{mnemonic: a.Mnemonic, branch: a.Branch}, nil
		}
	}
	var inst decode.X86Inst
	return func(b []byte, addr uint64, first bool) (int, firstInfo, error) {
		if err := dec.Decode(b, addr, &inst); err != nil {
			return 0, firstInfo{}, err
		}
		if inst.Len <= 0 || inst.Len > len(b) {
			return 0, firstInfo{}, fmt.Errorf("decoder returned length %d for %d bytes", inst.Len, len(b))
		}
		if !first {
			return inst.Len, firstInfo{}, nil
		}
		return inst.Len, firstInfo{mnemonic: x86Mnemonic(&inst), branch: inst.Branch}, nil
	}
}

// sweep decodes every function of img linearly and builds the report.
func sweep(img *elfImage, dec decode.X86Decoder, limit int, prog *progress) (*scanReport, error) {
	start := time.Now()
	rep := &scanReport{
		Path:        img.Path,
		Arch:        img.Arch.String(),
		Symbols:     img.Symtab,
		Functions:   len(img.Funcs),
		Aliases:     img.Aliases,
		Undecodable: []undecodable{},
		errCounts:   map[string]int{},
	}
	decodeOne := sweeper(img.Arch, dec)
	mnemonics := map[string]int{}
	branches := map[string]int{}
	for i := range img.Funcs {
		prog.update(i)
		fn := &img.Funcs[i]
		rep.Bytes += fn.Size
		code, err := img.funcBytes(fn)
		if err != nil {
			if errors.Is(err, errTruncatedELF) || errors.Is(err, errMalformedELF) {
				return nil, err
			}
			rep.addUndecodable(fn, 0, nil, err, limit)
			continue
		}
		for off := 0; off < len(code); {
			n, info, err := decodeOne(code[off:], fn.Addr+uint64(off), off == 0)
			if err != nil {
				rep.addUndecodable(fn, uint64(off), code[off:], err, limit)
				break
			}
			if off == 0 {
				mnemonics[info.mnemonic]++
				branches[info.branch.String()]++
			}
			rep.Instructions++
			rep.BytesDecoded += uint64(n)
			off += n
		}
	}
	rep.FirstMnemonics = histogram(mnemonics)
	rep.FirstBranches = histogram(branches)
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

func (rep *scanReport) addUndecodable(fn *elfFunc, off uint64, rest []byte, err error, limit int) {
	rep.UndecodableFuncs++
	rep.errCounts[err.Error()]++
	if limit >= 0 && len(rep.Undecodable) >= limit {
		return
	}
	rest = rest[:min(len(rest), 15)]
	rep.Undecodable = append(rep.Undecodable, undecodable{
		Name:   fn.Name,
		Addr:   hexAddr(fn.Addr),
		Offset: off,
		Bytes:  fmt.Sprintf("%x", rest),
		Error:  err.Error(),
	})
}

// histogram sorts counts by decreasing count, then name.
func histogram(m map[string]int) []histogramEntry {
	h := make([]histogramEntry, 0, len(m))
	for k, v := range m {
		h = append(h, histogramEntry{k, v})
	}
	sort.Slice(h, func(i, j int) bool {
		if h[i].Count != h[j].Count {
			return h[i].Count > h[j].Count
		}
		return h[i].Name < h[j].Name
	})
	return h
}

// topN keeps the first n entries; n < 0 keeps all.
func topN(h []histogramEntry, n int) []histogramEntry {
	if n >= 0 && len(h) > n {
		return h[:n]
	}
	return h
}

func printScanHuman(w io.Writer, rep *scanReport, top, limit int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "file\t%s\n", rep.Path)
	fmt.Fprintf(tw, "arch\t%s (functions from %s)\n", rep.Arch, rep.Symbols)
	fmt.Fprintf(tw, "functions\t%d\n", rep.Functions)
	fmt.Fprintf(tw, "instructions\t%d\n", rep.Instructions)
	fmt.Fprintf(tw, "bytes\t%d in functions, %d decoded (%s)\n", rep.Bytes, rep.BytesDecoded, percent(int(rep.BytesDecoded), int(rep.Bytes)))
	fmt.Fprintf(tw, "undecodable\t%d functions (%s)\n", rep.UndecodableFuncs, percent(rep.UndecodableFuncs, rep.Functions))
	rate := ""
	if rep.Seconds > 0 {
		rate = fmt.Sprintf(" (%.1f M instructions/s)", float64(rep.Instructions)/rep.Seconds/1e6)
	}
	fmt.Fprintf(tw, "time\t%s%s\n", time.Duration(rep.Seconds*float64(time.Second)).Round(time.Microsecond), rate)
	if err := tw.Flush(); err != nil {
		return err
	}

	if rep.UndecodableFuncs > 0 {
		fmt.Fprintf(w, "\nErrors:\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, e := range histogram(rep.errCounts) {
			fmt.Fprintf(tw, "  %d\t%s\n", e.Count, e.Name)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(rep.Undecodable) > 0 {
		fmt.Fprintf(w, "\nUndecodable functions (first %d of %d):\n", len(rep.Undecodable), rep.UndecodableFuncs)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, u := range rep.Undecodable {
			fmt.Fprintf(tw, "  %s\t%s+%#x\t%s\t%s\n", u.Addr, u.Name, u.Offset, u.Error, spacedHexString(u.Bytes))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	} else if rep.UndecodableFuncs > 0 && limit == 0 {
		fmt.Fprintf(w, "\n(use --limit N to list undecodable functions)\n")
	}

	decodedFirst := 0
	for _, e := range rep.FirstMnemonics {
		decodedFirst += e.Count
	}
	if top > 0 && decodedFirst > 0 {
		fmt.Fprintf(w, "\nFirst instruction of %d functions:\n", decodedFirst)
		ms, bs := topN(rep.FirstMnemonics, top), topN(rep.FirstBranches, top)
		mw, bw := nameWidth("mnemonic", ms), nameWidth("branch kind", bs)
		fmt.Fprintf(w, "  %-*s %7s %6s    %-*s %7s %6s\n", mw, "mnemonic", "count", "share", bw, "branch kind", "count", "share")
		for i := 0; i < max(len(ms), len(bs)); i++ {
			left := strings.Repeat(" ", mw+15)
			if i < len(ms) {
				left = fmt.Sprintf("%-*s %7d %6s", mw, ms[i].Name, ms[i].Count, percent(ms[i].Count, decodedFirst))
			}
			right := ""
			if i < len(bs) {
				right = fmt.Sprintf("    %-*s %7d %6s", bw, bs[i].Name, bs[i].Count, percent(bs[i].Count, decodedFirst))
			}
			fmt.Fprintf(w, "  %s%s\n", left, right)
		}
	}
	return nil
}

// nameWidth is the width of the name column of a histogram table.
func nameWidth(title string, h []histogramEntry) int {
	n := len(title)
	for _, e := range h {
		n = max(n, len(e.Name))
	}
	return n
}

func percent(n, total int) string {
	if total == 0 {
		return "0%"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(total))
}

// spacedHexString turns "f30f" into "f3 0f".
func spacedHexString(h string) string {
	var parts []string
	for i := 0; i+1 < len(h); i += 2 {
		parts = append(parts, h[i:i+2])
	}
	return strings.Join(parts, " ")
}
