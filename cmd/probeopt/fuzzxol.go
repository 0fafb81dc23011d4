package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/fuzz"
)

// The x86-64 relocation campaign: `fuzz xol --arch x86-64`, against the
// host CPU.

func init() {
	fuzzXOLRunners["x86-64"] = runFuzzXOLX86
}

// xolX86Report is the report of `fuzz xol --arch x86-64`; it is also its
// JSON output.
type xolX86Report struct {
	campaignHead
	hostHead
	*fuzz.XOLX86Report
	MismatchList []xolX86Mismatch `json:"mismatch_list"`
	Stopped      bool             `json:"stopped,omitempty"` // --stop-after ended the campaign early
}

// xolX86Mismatch is one mismatch in the JSON output.
type xolX86Mismatch struct {
	Class  string `json:"class"`
	Bytes  string `json:"bytes"`
	Text   string `json:"text"`
	Copy   string `json:"copy"`
	Run    string `json:"run"` // "step", "boost", "relocate"...
	Reason string `json:"reason"`
	Want   string `json:"want,omitempty"`
	Got    string `json:"got,omitempty"`
	Vector string `json:"vector"`
}

// runFuzzXOLX86 runs the x86-64 relocation campaign on the host CPU.
func runFuzzXOLX86(cmd *cobra.Command, o *fuzzEmulateOptions) error {
	out, host, err := startHostCampaign(cmd, o, "fuzz xol", fuzz.XOLX86Classes)
	if err != nil {
		return err
	}
	oracle, err := fuzz.NewXOLX86Oracle()
	if err != nil {
		return fmt.Errorf("start the cpu oracle: %w", err)
	}
	defer oracle.Close()
	rep := xolX86Report{campaignHead: o.head("xol"), hostHead: host, MismatchList: []xolX86Mismatch{}}
	c := fuzz.XOLX86Campaign{
		Cases:  o.n,
		Seed:   o.seed,
		Class:  o.class,
		Vendor: host.vendor,
		OnMismatch: func(m *fuzz.XOLX86Mismatch) bool {
			return out.mismatch(m, func() {
				rep.MismatchList = append(rep.MismatchList, xolX86Mismatch{
					Class: m.Case.Class, Bytes: fmt.Sprintf("%x", m.Case.Bytes), Text: m.Text, Copy: m.Copy,
					Run: m.Run, Reason: m.Reason, Want: m.Want, Got: m.Got, Vector: m.Case.Vector(),
				})
			})
		},
		Progress: out.prog.update,
	}
	res, err := c.Run(oracle)
	if err := out.ended(err); err != nil {
		return err
	}
	rep.XOLX86Report, rep.Stopped = res, out.stopped
	return out.report(&rep, func() { printXOLX86Report(out.stdout, &rep) }, res.Mismatches, "between original instructions and their relocated copies")
}

// printXOLX86Report prints the summary as tables.
func printXOLX86Report(w io.Writer, rep *xolX86Report) {
	r := rep.XOLX86Report
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	rep.campaignHead.print(tw, rep.oracle())
	fmt.Fprintf(tw, "generated\t%d cases\n", r.Generated)
	fmt.Fprintf(tw, "compared\t%d (%d completed, %d faulted; %d also boosted)\n", r.Compared, r.Completed, r.Faulted, r.Boosted)
	if r.Unboosted > 0 {
		fmt.Fprintf(tw, "not boosted\t%d: the instruction left rsp non-canonical, and this host cannot resume a thread there\n", r.Unboosted)
	}
	printCampaignEnd(tw, r.Mismatches, rep.Stopped, r.Seconds)
	fmt.Fprintf(tw, "cases/s\t%.0f compared\n", r.PerSecond)
	printCountRows(tw, "refused", r.Refused)
	printCountRows(tw, "form", r.Forms)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "class\tcases\tcompared\tfaulted\tmismatches\t\n")
	for _, name := range fuzz.XOLX86Classes {
		if c := r.Classes[name]; c != nil {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t\n", name, c.Generated, c.Compared, c.Faulted, c.Mismatches)
		}
	}
	tw.Flush()
}
