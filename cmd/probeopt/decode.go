package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/probeopt/probeopt/decode"
)

type decodeOptions struct {
	arch   string
	vendor string
	addr   string
	syntax string
	json   bool
}

func newDecodeCmd() *cobra.Command {
	var o decodeOptions
	cmd := &cobra.Command{
		Use:   "decode HEX...",
		Short: "Decode the first instruction of each byte string",
		Long: `Decode the first instruction of each HEX argument and print its length, its
text and every field the decoder found: for x86-64 the encoding, prefixes,
REX/VEX/EVEX bits, opcode map and byte, ModRM and SIB, where the displacement
and immediates sit, the RIP-relative operand, the branch kind and target, and
the registers read and written.

Each HEX argument is one byte string without spaces, optionally prefixed with
0x. Bytes after the first instruction are counted but not decoded. An
argument that is not hex, has an odd number of digits, or holds no complete
instruction is reported (on stderr, or in the "error" field with --json) and
the exit status is 1 once every argument has been reported.

With --json each argument gives one JSON object on its own line, with at
least "input", "bytes" (the instruction's bytes in hex, or the input on
error), "len", "text" and, on failure only, "error".`,
		Example: `  probeopt decode f30f1efa
  probeopt decode --addr 0x401000 e8fbffffff 488b0510000000
  probeopt decode --vendor intel --json 66e900000000
  probeopt decode --arch arm64 1f2003d5 c0035fd6`,
		Args: argsRange(1, -1, "HEX"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return runDecode(cmd, &o, args)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&o.arch, "arch", "x86-64", "decode for `ARCH`: x86-64 or arm64")
	f.StringVar(&o.vendor, "vendor", "amd", "follow `VENDOR` where x86-64 CPUs decode differently: amd, intel, or host (the vendor_id in /proc/cpuinfo)")
	f.StringVar(&o.addr, "addr", "0", "place the first byte at virtual address `ADDR` (0x-prefixed hex, or decimal), for branch and RIP-relative targets")
	f.StringVar(&o.syntax, "syntax", "gnu", "write x86-64 text in `SYNTAX`: gnu (AT&T) or intel")
	f.BoolVar(&o.json, "json", false, "print one JSON object per argument, one per line")
	return cmd
}

// decodeResult is the report on one argument. It is printed as a block of
// lines, or marshalled as one JSON object.
type decodeResult struct {
	Input    string `json:"input"`
	Bytes    string `json:"bytes"`
	Len      int    `json:"len"`
	Text     string `json:"text"`
	Error    string `json:"error,omitempty"`
	Arch     string `json:"arch"`
	Addr     string `json:"addr"`
	Trailing int    `json:"trailing"` // bytes of the input after the instruction
	Mnemonic string `json:"mnemonic,omitempty"`

	*x86Fields
	*arm64Fields

	err error
}

func runDecode(cmd *cobra.Command, o *decodeOptions, args []string) error {
	arch, err := parseArch(o.arch)
	if err != nil {
		return err
	}
	addr, err := parseAddr(o.addr)
	if err != nil {
		return err
	}
	syntax, err := parseSyntax(o.syntax)
	if err != nil {
		return err
	}
	if err := checkVendorName(o.vendor); err != nil {
		return err
	}
	var dec decode.X86Decoder
	if arch == decode.X86_64 {
		v, err := parseVendor(o.vendor)
		if err != nil {
			return err
		}
		dec.Vendor = v
	}

	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	enc := json.NewEncoder(stdout)
	failed := 0
	for _, arg := range args {
		r := decodeArg(arch, dec, addr, syntax, arg)
		if r.err != nil {
			failed++
		}
		switch {
		case o.json:
			if err := enc.Encode(r); err != nil {
				return fmt.Errorf("write JSON: %w", err)
			}
		case r.err != nil:
			fmt.Fprintf(stderr, "probeopt: decode %q: %v\n", arg, r.err)
		default:
			if err := printDecodeHuman(stdout, &r); err != nil {
				return fmt.Errorf("write output: %w", err)
			}
		}
	}
	if failed > 0 {
		return errReported
	}
	return nil
}

// decodeArg parses and decodes one argument. Failures are recorded in the
// result, never returned.
func decodeArg(arch decode.Arch, dec decode.X86Decoder, addr uint64, syntax, arg string) decodeResult {
	r := decodeResult{Input: arg, Bytes: arg, Arch: arch.String(), Addr: hexAddr(addr)}
	b, err := parseHexArg(arg)
	if err != nil {
		r.err = err
		r.Error = err.Error()
		return r
	}
	r.Bytes = hex.EncodeToString(b)
	switch arch {
	case decode.X86_64:
		var inst decode.X86Inst
		if err := dec.Decode(b, addr, &inst); err != nil {
			r.err = err
			break
		}
		r.Len = inst.Len
		r.Text = x86Text(&inst, syntax)
		r.Mnemonic = x86Mnemonic(&inst)
		r.x86Fields = newX86Fields(&inst, dec.Vendor)
	case decode.ARM64:
		a, err := decodeARM64(b, addr, true)
		if err != nil {
			r.err = err
			break
		}
		r.Len = a.Len
		r.Text = a.Text
		r.Mnemonic = a.Mnemonic
		r.arm64Fields = newARM64Fields(&a)
	}
	if r.err != nil {
		r.Error = r.err.Error()
		return r
	}
	r.Bytes = hex.EncodeToString(b[:r.Len])
	r.Trailing = len(b) - r.Len
	return r
}

// printDecodeHuman prints a decoded instruction as a header line followed by
// one indented line per field.
func printDecodeHuman(w io.Writer, r *decodeResult) error {
	b, _ := hex.DecodeString(r.Bytes)
	if _, err := fmt.Fprintf(w, "%s:  %-24s %s\n", r.Addr, spacedHex(b), r.Text); err != nil {
		return err
	}
	var lines []field
	switch {
	case r.x86Fields != nil:
		lines = r.x86Fields.lines()
	case r.arm64Fields != nil:
		lines = r.arm64Fields.lines()
	}
	lines = append([]field{{"length", plural(r.Len, "byte")}, {"mnemonic", r.Mnemonic}}, lines...)
	if r.Trailing > 0 {
		lines = append(lines, field{"trailing", plural(r.Trailing, "byte") + " after the instruction, not decoded"})
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintf(tw, "    %s\t%s\n", l.name, l.value)
	}
	return tw.Flush()
}

// field is one line of human output.
type field struct{ name, value string }

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// spacedHex renders bytes as "f3 0f 1e fa".
func spacedHex(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		if i > 0 {
			sb.WriteByte(' ')
		}
		fmt.Fprintf(&sb, "%02x", c)
	}
	return sb.String()
}

// hexAddr renders an address as 0x-prefixed hex. Addresses are strings in
// JSON so that 64-bit values survive readers that parse numbers as doubles.
func hexAddr(a uint64) string { return fmt.Sprintf("%#x", a) }
