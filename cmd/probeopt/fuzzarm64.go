package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/fuzz"
)

// The arm64 campaigns: `fuzz emulate --arch arm64` (registered below in
// the runners of `fuzz emulate`) and `fuzz xol`, both against qemu-aarch64.

func init() {
	fuzzEmulateRunners["arm64"] = runFuzzEmulateARM64
}

// fuzzXOLRunners are the relocation campaigns by architecture.
var fuzzXOLRunners = map[string]func(cmd *cobra.Command, o *fuzzEmulateOptions) error{
	"arm64": runFuzzXOLARM64,
}

func newFuzzXOLCmd() *cobra.Command {
	var o fuzzEmulateOptions
	cmd := &cobra.Command{
		Use:   "xol",
		Short: "Check instructions relocated to another address against the CPU (x86-64) or qemu-user (arm64)",
		Long: `x86-64 (the default): relocate one instruction to a slot far from it
(within and beyond +-2 GiB), run the original at its address and the copy at
the slot on this CPU from the same state, apply the post-step fixups, and
compare every register, rip, the flags and every byte written.

arm64: generate runs of one to four instructions (branches, calls, adr, adrp,
literal loads, indirect branches, loads, stores and arithmetic), relocate
each with the relocator (xol) to another address: in the same code window,
2 MiB away (beyond b.cond and literal reach), 256 MiB away (beyond b) or
6 GiB away (beyond adrp), with random options (detour or single step,
scratch registers allowed or not, BTI-guarded targets, live process). Then
run the original at its address and the relocated block at the new one under
qemu-aarch64, from the same registers, flags, FP/SIMD registers and memory,
and compare the final state: every register but the scratch register the
block reports, the flags, the FP/SIMD registers, every changed quadword of
memory, the signal, and the PC, where a fault inside the block must map back
to the original instruction.

The oracle is a small static aarch64 program built with aarch64-linux-gnu-gcc
(cached in the temporary directory) and run under qemu-aarch64 (Debian
qemu-user), many cases per process run; both must be on PATH.

Classes (--class) fix the first instruction of every run: ` + strings.Join(fuzz.ARM64XOLClasses, ", ") + `.

Each mismatch is printed as it is found. At the end a summary gives the
runs generated, compared and refused (by refusal code), the relocated
forms, the runs per second and a breakdown per class. With --json the whole
report is one JSON object. The exit status is 1 if there was any mismatch.`,
		Example: `  probeopt fuzz xol --arch arm64
  probeopt fuzz xol --arch arm64 -n 1000000 --seed 42
  probeopt fuzz xol --arch arm64 --class bcond --json`,
		Args: argsRange(0, 0, ""),
		RunE: campaignRunE(&o, fuzzXOLRunners, "runs"),
	}
	campaignFlags(cmd, &o, "relocator to check: `ARCH` x86-64 or arm64", "generate `N` runs",
		"make the first instruction of every run of class `NAME` (default: all classes)")
	return cmd
}

// arm64FuzzReport is the report of the arm64 campaigns; it is also their
// JSON output.
type arm64FuzzReport struct {
	campaignHead
	*fuzz.ARM64Report
	MismatchList []arm64FuzzMismatch `json:"mismatch_list"`
	Stopped      bool                `json:"stopped,omitempty"` // --stop-after ended the campaign early
}

// arm64FuzzMismatch is one mismatch in the JSON output.
type arm64FuzzMismatch struct {
	Class    string            `json:"class"`
	Text     string            `json:"text"`
	Code     []string          `json:"code"` // "address:word"
	Initial  map[string]string `json:"initial"`
	Reason   string            `json:"reason"`
	Expected string            `json:"expected"`
	Oracle   string            `json:"oracle"`
	Index    int               `json:"index"`
}

// arm64StateJSON renders a register file for JSON.
func arm64StateJSON(s *emulate.ARM64State) map[string]string {
	m := map[string]string{}
	for i, x := range s.X {
		m[fmt.Sprintf("x%d", i)] = fmt.Sprintf("%#x", x)
	}
	m["sp"] = fmt.Sprintf("%#x", s.SP)
	m["pc"] = fmt.Sprintf("%#x", s.PC)
	m["nzcv"] = fmt.Sprintf("%#x", s.NZCV>>28)
	for i, v := range s.V {
		if v != [2]uint64{} {
			m[fmt.Sprintf("v%d", i)] = fmt.Sprintf("%#x%016x", v[1], v[0])
		}
	}
	return m
}

func arm64MismatchJSON(m *fuzz.ARM64Mismatch) arm64FuzzMismatch {
	j := arm64FuzzMismatch{Class: m.Class, Text: m.Text, Initial: arm64StateJSON(&m.Case.State), Reason: m.Diff,
		Expected: m.Want, Oracle: m.Got, Index: m.Index}
	for _, p := range m.Case.Code {
		j.Code = append(j.Code, fmt.Sprintf("%#x:%08x", p.Addr, p.Word))
	}
	return j
}

// arm64Oracle is what the arm64 campaigns run their cases on.
type arm64Oracle interface {
	fuzz.ARM64Runner
	Close() error
}

// startARM64Oracle starts the oracle of the arm64 campaigns: qemu-aarch64
// (fuzz.StartQEMU) with the image of seed. It is a variable only so that a
// test can wrap the oracle to make it disagree with probeopt and check how
// the commands report that; nothing else changes it.
var startARM64Oracle = func(seed uint64) (arm64Oracle, error) {
	q, err := fuzz.StartQEMU(fuzz.NewARM64Image(seed), nil)
	if err != nil {
		return nil, err
	}
	return q, nil
}

// runARM64Campaign starts the oracle, runs a campaign with the mismatch
// and progress callbacks it is given, and prints the report.
func runARM64Campaign(cmd *cobra.Command, o *fuzzEmulateOptions, kind, unit string, classes []string,
	run func(q fuzz.ARM64Runner, on func(*fuzz.ARM64Mismatch) bool, prog func(int)) (*fuzz.ARM64Report, error)) error {
	out, err := newCampaignOutput(cmd, o, "fuzz "+kind, unit, classes)
	if err != nil {
		return err
	}
	q, err := startARM64Oracle(o.seed)
	if err != nil {
		return fmt.Errorf("start the qemu oracle: %w", err)
	}
	defer q.Close()
	rep := arm64FuzzReport{campaignHead: o.head(kind), MismatchList: []arm64FuzzMismatch{}}
	res, err := run(q, func(m *fuzz.ARM64Mismatch) bool {
		return out.mismatch(m, func() { rep.MismatchList = append(rep.MismatchList, arm64MismatchJSON(m)) })
	}, out.prog.update)
	if err := out.ended(err); err != nil {
		return err
	}
	rep.ARM64Report, rep.Stopped = res, out.stopped
	return out.report(&rep, func() { printARM64FuzzReport(out.stdout, &rep, unit, classes) }, res.Mismatches, "against qemu-aarch64")
}

// runFuzzEmulateARM64 runs the arm64 emulator campaign.
func runFuzzEmulateARM64(cmd *cobra.Command, o *fuzzEmulateOptions) error {
	return runARM64Campaign(cmd, o, "emulate", "cases", fuzz.ARM64EmuClasses,
		func(q fuzz.ARM64Runner, on func(*fuzz.ARM64Mismatch) bool, prog func(int)) (*fuzz.ARM64Report, error) {
			c := fuzz.ARM64EmuCampaign{Cases: o.n, Seed: o.seed, Class: o.class, OnMismatch: on, Progress: prog}
			return c.Run(q)
		})
}

// runFuzzXOLARM64 runs the arm64 relocation campaign.
func runFuzzXOLARM64(cmd *cobra.Command, o *fuzzEmulateOptions) error {
	return runARM64Campaign(cmd, o, "xol", "runs", fuzz.ARM64XOLClasses,
		func(q fuzz.ARM64Runner, on func(*fuzz.ARM64Mismatch) bool, prog func(int)) (*fuzz.ARM64Report, error) {
			c := fuzz.ARM64XOLCampaign{Cases: o.n, Seed: o.seed, Class: o.class, OnMismatch: on, Progress: prog}
			return c.Run(q)
		})
}

// printARM64FuzzReport prints the summary as tables.
func printARM64FuzzReport(w io.Writer, rep *arm64FuzzReport, unit string, classes []string) {
	r := rep.ARM64Report
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rep.campaignHead.print(tw, "qemu-aarch64 -cpu "+fuzz.QEMUDefaultCPU)
	fmt.Fprintf(tw, "generated\t%d %s\n", r.Generated, unit)
	fmt.Fprintf(tw, "compared\t%d (%d completed, %d faulted)\n", r.Cases, r.Completed, r.Faulted)
	printCampaignEnd(tw, r.Mismatches, rep.Stopped, r.Seconds)
	fmt.Fprintf(tw, "%s/s\t%.0f compared\n", unit, r.PerSecond)
	printCountRows(tw, "refused", r.Refused)
	printCountRows(tw, "not compared", r.Skipped)
	printCountRows(tw, "form", r.Forms)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "class\t%s\tcompleted\tfaulted\tmismatches\t\n", unit)
	for _, name := range classes {
		if c := r.Classes[name]; c != nil {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", name, c.Cases, c.Completed, c.Faulted, c.Mismatches)
		}
	}
	tw.Flush()
}
