package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/emulate"
	"github.com/probeopt/probeopt/fuzz"
	"github.com/probeopt/probeopt/internal/hostcpu"
)

// newFuzzCmd builds `probeopt fuzz`, the parent of the differential
// campaigns. Each campaign is a subcommand of its own.
func newFuzzCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "fuzz",
		Short: "Run differential campaigns against the CPU",
		Long: `Run differential campaigns that check probeopt against the machine: the
same instruction and state go to probeopt and to the CPU, and every
disagreement is reported with everything needed to replay it.`,
	}
	groupCmd(cmd)
	cmd.AddCommand(newFuzzEmulateCmd(), newFuzzXOLCmd())
	return cmd
}

type fuzzEmulateOptions struct {
	arch  string
	n     int
	seed  uint64
	class string
	stop  int
	json  bool
}

// fuzzEmulateRunners are the emulator campaigns by architecture.
var fuzzEmulateRunners = map[string]func(cmd *cobra.Command, o *fuzzEmulateOptions) error{
	"x86-64": runFuzzEmulateX86,
}

// campaignRunE is the body of a campaign command: it picks a random seed
// unless --seed was given, checks --arch against runners and -n, and runs
// the campaign of --arch. unit names what -n counts.
func campaignRunE(o *fuzzEmulateOptions, runners map[string]func(*cobra.Command, *fuzzEmulateOptions) error, unit string) func(*cobra.Command, []string) error {
	return runE(func(cmd *cobra.Command, args []string) error {
		if !cmd.Flags().Changed("seed") {
			o.seed = rand.Uint64()
		}
		run, ok := runners[o.arch]
		if !ok {
			return usagef("invalid --arch %q: want %s", o.arch, strings.Join(slices.Sorted(maps.Keys(runners)), " or "))
		}
		if o.n <= 0 {
			return usagef("invalid -n %d: want a positive number of %s", o.n, unit)
		}
		return run(cmd, o)
	})
}

func newFuzzEmulateCmd() *cobra.Command {
	var o fuzzEmulateOptions
	cmd := &cobra.Command{
		Use:   "emulate",
		Short: "Check the instruction emulator against the CPU",
		Long: `Generate instructions that the emulator claims to execute, with initial
states biased to edge cases (0, -1, sign bits, carries, shift counts at and
beyond the operand width, addresses at the edges of mapped memory and of the
canonical range), run each both on the host CPU and in the emulator, and
compare the final registers, rip, the flags (except those the manuals leave
undefined for the instruction), every byte written, and, for a faulting case,
the exception and the faulting address.

For x86-64 the CPU side runs in a child process, many cases per round trip;
it needs Linux on x86-64 and permission to use ptrace.

The x86-64 classes (--class): ` + strings.Join(fuzz.EmuClasses(), ", ") + `;
"random" is random bytes filtered by the decoder and the emulator. Without
--class every class is generated.

Each mismatch is printed as it is found: the bytes, the reason, the initial
state and both final states, and a line that can be added to
internal/oracle/x86cpu/testdata/emu/regressions.txt. At the end a summary
gives the cases run, the cases per second and a breakdown per class. With --json the whole report
is one JSON object. The exit status is 1 if there was any mismatch.`,
		Example: `  probeopt fuzz emulate
  probeopt fuzz emulate -n 10000000 --seed 42
  probeopt fuzz emulate --class shift -n 200000 --json`,
		Args: argsRange(0, 0, ""),
		RunE: campaignRunE(&o, fuzzEmulateRunners, "cases"),
	}
	campaignFlags(cmd, &o, "emulator to check: `ARCH` x86-64 or arm64", "run `N` cases",
		"generate only class `NAME` (default: all classes)")
	return cmd
}

// campaignFlags registers the flags every campaign command has, with the
// usages of --arch, -n and --class given.
func campaignFlags(cmd *cobra.Command, o *fuzzEmulateOptions, arch, n, class string) {
	f := cmd.Flags()
	f.StringVar(&o.arch, "arch", "x86-64", arch)
	f.IntVarP(&o.n, "cases", "n", 100000, n)
	f.Uint64Var(&o.seed, "seed", 0, "seed `S` of the generators (default: a random seed, printed in the report)")
	f.StringVar(&o.class, "class", "", class)
	f.IntVar(&o.stop, "stop-after", 100, "stop after `M` mismatches (0: never)")
	f.BoolVar(&o.json, "json", false, "print the report as one JSON object")
}

// fuzzEmulateReport is the report of `fuzz emulate`; it is also the JSON
// output.
type fuzzEmulateReport struct {
	campaignHead
	hostHead
	*fuzz.EmuReport
	MismatchList []fuzzMismatch `json:"mismatch_list"`
	Stopped      bool           `json:"stopped,omitempty"` // --stop-after ended the campaign early
}

// fuzzMismatch is one mismatch in the JSON output.
type fuzzMismatch struct {
	Class     string      `json:"class"`
	Bytes     string      `json:"bytes"`
	Text      string      `json:"text"`
	Reason    string      `json:"reason"`
	ImageSeed uint64      `json:"image_seed"`
	Initial   fuzzState   `json:"initial"`
	CPU       fuzzOutcome `json:"cpu"`
	Emulator  fuzzOutcome `json:"emulator"`
	Compared  string      `json:"flags_compared"`
	Vector    string      `json:"vector"`
}

// fuzzOutcome is how one side ended a case.
type fuzzOutcome struct {
	Outcome string    `json:"outcome"` // "completed" or the fault
	State   fuzzState `json:"state"`
	Writes  []string  `json:"writes"` // changed quadwords, "[addr]=value"
}

// fuzzState is a register file with hexadecimal values.
type fuzzState map[string]string

// stateJSON renders a state for JSON.
func stateJSON(s *emulate.X86State) fuzzState {
	m := fuzzState{}
	for r := 0; r < 16; r++ {
		m[decode.X86RegName(r)] = fmt.Sprintf("%#x", s.GPR[r])
	}
	m["rip"] = fmt.Sprintf("%#x", s.RIP)
	m["rflags"] = fmt.Sprintf("%#x", s.RFLAGS)
	m["fs_base"] = fmt.Sprintf("%#x", s.FSBase)
	m["gs_base"] = fmt.Sprintf("%#x", s.GSBase)
	return m
}

// writesJSON renders changed memory words.
func writesJSON(w []fuzz.EmuMemWord) []string {
	out := make([]string, len(w))
	for i, x := range w {
		out[i] = fmt.Sprintf("[%#x]=%#x", x.Addr, x.Val)
	}
	return out
}

// mismatchJSON converts a mismatch for the JSON output.
func mismatchJSON(m *fuzz.EmuMismatch) fuzzMismatch {
	cpu := fmt.Sprintf("signal %d, trap %d, error code %#x, address %#x", m.CPU.Signal, m.CPU.Trap, m.CPU.ErrCode, m.CPU.Addr)
	if m.CPU.Signal == 5 && m.CPU.Trap == 1 {
		cpu = "completed"
	}
	emu := "completed"
	if m.Emu.Err != nil {
		emu = m.Emu.Err.Error()
	}
	return fuzzMismatch{
		Class: m.Case.Class, Bytes: hex.EncodeToString(m.Case.Bytes), Text: m.Text, Reason: m.Reason,
		ImageSeed: m.ImageSeed, Initial: stateJSON(&m.Case.Init),
		CPU:      fuzzOutcome{Outcome: cpu, State: stateJSON(&m.CPU.State), Writes: writesJSON(m.CPU.Writes)},
		Emulator: fuzzOutcome{Outcome: emu, State: stateJSON(&m.Emu.State), Writes: writesJSON(m.Emu.Writes)},
		Compared: fmt.Sprintf("%#x", m.Compared), Vector: m.Vector(),
	}
}

// hostCPUName names the host CPU for a campaign's report: the model name,
// vendor id, family and model.
func hostCPUName() string {
	i := hostcpu.Host()
	return fmt.Sprintf("%s, %s family %d model %d", i.ModelName, i.VendorID, i.Family, i.Model)
}

// emuOracle is what `fuzz emulate` runs its x86-64 cases on.
type emuOracle interface {
	fuzz.EmuRunner
	Close() error
}

// startEmuOracle starts the oracle of the x86-64 emulator campaign: the
// host CPU (fuzz.NewEmuOracle). It is a variable only so that a test can
// wrap the oracle to make it disagree with the emulator and check how the
// command reports that; nothing else changes it.
var startEmuOracle = func() (emuOracle, error) {
	o, err := fuzz.NewEmuOracle()
	if err != nil {
		return nil, err
	}
	return o, nil
}

// runFuzzEmulateX86 runs the x86-64 emulator campaign.
func runFuzzEmulateX86(cmd *cobra.Command, o *fuzzEmulateOptions) error {
	out, host, err := startHostCampaign(cmd, o, "fuzz emulate", fuzz.EmuClasses())
	if err != nil {
		return err
	}
	oracle, err := startEmuOracle()
	if err != nil {
		return fmt.Errorf("start the cpu oracle: %w", err)
	}
	defer oracle.Close()
	rep := fuzzEmulateReport{campaignHead: o.head(""), hostHead: host, MismatchList: []fuzzMismatch{}}
	c := fuzz.EmuCampaign{
		Cases:  o.n,
		Seed:   o.seed,
		Class:  o.class,
		Vendor: host.vendor,
		OnMismatch: func(m *fuzz.EmuMismatch) bool {
			return out.mismatch(m, func() { rep.MismatchList = append(rep.MismatchList, mismatchJSON(m)) })
		},
		Progress: out.prog.update,
	}
	res, err := c.Run(oracle)
	if err := out.ended(err); err != nil {
		return err
	}
	rep.EmuReport, rep.Stopped = res, out.stopped
	return out.report(&rep, func() { printFuzzEmulateReport(out.stdout, &rep) }, res.Mismatches, "between the emulator and the cpu")
}

// campaignHead is the start of every campaign's report, and of its JSON
// output.
type campaignHead struct {
	Campaign string `json:"campaign,omitempty"` // "emulate" or "xol"; "" for the x86-64 emulator campaign
	Arch     string `json:"arch"`
	Seed     uint64 `json:"seed"`
	Class    string `json:"class,omitempty"`
}

// head is the head of the report of campaign run with o.
func (o *fuzzEmulateOptions) head(campaign string) campaignHead {
	return campaignHead{Campaign: campaign, Arch: o.arch, Seed: o.seed, Class: o.class}
}

// print writes the head's rows of a summary table: the campaign (when it
// has a name), the arch and its oracle, the seed and the class.
func (h *campaignHead) print(tw io.Writer, oracle string) {
	class := h.Class
	if class == "" {
		class = "all"
	}
	if h.Campaign != "" {
		fmt.Fprintf(tw, "campaign\t%s\n", h.Campaign)
	}
	fmt.Fprintf(tw, "arch\t%s (oracle: %s)\n", h.Arch, oracle)
	fmt.Fprintf(tw, "seed\t%d\n", h.Seed)
	fmt.Fprintf(tw, "class\t%s\n", class)
}

// printCampaignEnd writes the last rows a summary table has in every
// campaign: the mismatches, whether --stop-after ended the campaign, and
// its time in seconds.
func printCampaignEnd(tw io.Writer, mismatches int, stopped bool, seconds float64) {
	fmt.Fprintf(tw, "mismatches\t%d\n", mismatches)
	if stopped {
		fmt.Fprintf(tw, "stopped\tafter %d mismatches (--stop-after)\n", mismatches)
	}
	fmt.Fprintf(tw, "time\t%.1f s\n", seconds)
}

// printCountRows writes a summary table's row "label  N: key" for each key
// of counts, in the keys' order.
func printCountRows(tw io.Writer, label string, counts map[string]int) {
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(tw, "%s\t%d: %s\n", label, counts[k], k)
	}
}

// hostHead names the host CPU, the oracle of the x86-64 campaigns: Vendor
// is the vendor whose rules the campaign follows, CPU names the model.
type hostHead struct {
	Vendor string `json:"vendor"`
	CPU    string `json:"cpu"`
	vendor decode.Vendor
}

// oracle names the host CPU as the oracle in a summary table.
func (h *hostHead) oracle() string {
	return fmt.Sprintf("the host cpu, %s: %s", h.Vendor, h.CPU)
}

// startHostCampaign begins a campaign against the host CPU: it checks
// --class against classes, returns the campaign's output (whose progress
// line is labelled label) and reads the host's vendor.
func startHostCampaign(cmd *cobra.Command, o *fuzzEmulateOptions, label string, classes []string) (*campaignOutput, hostHead, error) {
	out, err := newCampaignOutput(cmd, o, label, "cases", classes)
	if err != nil {
		return nil, hostHead{}, err
	}
	vendor, err := fuzz.HostVendor()
	if err != nil {
		return nil, hostHead{}, fmt.Errorf("host cpu: %w", err)
	}
	return out, hostHead{Vendor: vendor.String(), CPU: hostCPUName(), vendor: vendor}, nil
}

// campaignOutput is what every campaign command does around its campaign:
// it prints each mismatch as it is found (or keeps it for the JSON
// report), stops the campaign after --stop-after mismatches, and prints the
// report at the end.
type campaignOutput struct {
	o              *fuzzEmulateOptions
	stdout, stderr io.Writer
	prog           *progress // nil when stderr is no terminal: draws nothing
	found          int
	stopped        bool // --stop-after ended the campaign
}

// newCampaignOutput checks --class against classes and returns the output
// of a campaign whose progress line reads "label: done/total unit".
func newCampaignOutput(cmd *cobra.Command, o *fuzzEmulateOptions, label, unit string, classes []string) (*campaignOutput, error) {
	if o.class != "" && !slices.Contains(classes, o.class) {
		return nil, usagef("invalid --class %q: want one of %s", o.class, strings.Join(classes, ", "))
	}
	out := &campaignOutput{o: o, stdout: cmd.OutOrStdout(), stderr: cmd.ErrOrStderr()}
	if isTerminal(out.stderr) {
		out.prog = newProgress(out.stderr, label, unit, o.n)
	}
	return out, nil
}

// mismatch handles mismatch m: with --json keep is called to add it to the
// report, otherwise it is printed. It returns whether the campaign goes on.
func (c *campaignOutput) mismatch(m fmt.Stringer, keep func()) bool {
	if c.o.json {
		keep()
	} else {
		c.prog.done()
		fmt.Fprintf(c.stdout, "%s\n\n", m)
	}
	c.found++
	if c.o.stop > 0 && c.found >= c.o.stop {
		c.stopped = true
		return false
	}
	return true
}

// ended erases the progress line once the campaign has ended, and wraps
// the campaign's error.
func (c *campaignOutput) ended(err error) error {
	c.prog.done()
	if err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	return nil
}

// report prints the report: rep as indented JSON with --json, otherwise
// with print. When the campaign found mismatches, it says so on stderr
// ("N mismatches " + what; not with --json, whose report says it) and
// returns errReported.
func (c *campaignOutput) report(rep any, print func(), mismatches int, what string) error {
	if c.o.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		print()
	}
	if mismatches > 0 {
		if !c.o.json {
			fmt.Fprintf(c.stderr, "probeopt: %d mismatches %s\n", mismatches, what)
		}
		return errReported
	}
	return nil
}

// printFuzzEmulateReport prints the summary as tables.
func printFuzzEmulateReport(w io.Writer, rep *fuzzEmulateReport) {
	r := rep.EmuReport
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rep.campaignHead.print(tw, rep.oracle())
	fmt.Fprintf(tw, "cases\t%d (%d completed, %d faulted; %d skipped: they touched the oracle's memory)\n", r.Cases, r.Completed, r.Faulted, r.Skipped)
	if r.CanonicalRSP {
		fmt.Fprintf(tw, "rsp\tcanonical only: this host cannot return to user mode with a non-canonical stack pointer\n")
	}
	if r.NotRun > 0 {
		fmt.Fprintf(tw, "not run\t%d: their rsp is not canonical, and this host cannot return to user mode with such a stack pointer\n", r.NotRun)
	}
	printCampaignEnd(tw, r.Mismatches, rep.Stopped, r.Seconds)
	fmt.Fprintf(tw, "cases/s\t%.0f\n", r.PerSecond)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "class\tcases\tcompleted\tfaulted\tmismatches\t\n")
	for _, name := range fuzz.EmuClasses() {
		if c := r.Classes[name]; c != nil {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", name, c.Cases, c.Completed, c.Faulted, c.Mismatches)
		}
	}
	tw.Flush()
}
