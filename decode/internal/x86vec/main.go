// Command x86vec writes the x86-64 decoder test vectors, decode/testdata/x86.txt.
//
// Regenerate from the repository root with
//
//	go run ./decode/internal/x86vec > decode/testdata/x86.txt
//
// It needs llvm-mc (LLVM 14 or later; set LLVM_MC to use another binary) and
// GNU objdump (binutils 2.40 or later; set OBJDUMP) on PATH. The decoder under
// test is never consulted: every expectation comes from the assembler, from
// objdump, or from a hand vector whose comment cites the manual rule.
//
// How an expectation is established:
//
//   - Each template is Intel-syntax assembly. llvm-mc -show-encoding gives
//     the bytes, so the expected length is the assembler's.
//   - A symbol operand (sym) leaves a fixup whose offset and kind llvm-mc
//     prints: reloc_riprel_4byte* marks a RIP-relative disp32 (rip=, disp=),
//     FK_PCRel_N and reloc_branch_4byte_pcrel a relative branch displacement
//     (rel=). The fixup bytes are filled with fixed values.
//   - A placeholder %i8 %i16 %i32 %i64 (first immediate), %j8 (second
//     immediate), %d8 %d32 %d64 (displacement; %d8x64 scales the value for
//     EVEX compressed displacements) is assembled twice with two values that
//     differ in every byte; the bytes that change locate the field (imm=,
//     imm2=, disp=). A custom pair is written %i8(3,5).
//   - The encoding scheme and opcode map (enc=, map=) and the branch kind
//     (branch=) are declared with each group of templates; the generator
//     checks enc and map against the escape bytes it assembled.
//   - Every vector's length is then checked against objdump (default mode,
//     which follows AMD64, and -M intel64 for Intel-only lines). A line on
//     which objdump disagrees is dropped, and written as a comment with the
//     reason, unless it is a hand vector whose comment shows objdump wrong.
//   - Truncated vectors are proper prefixes of assembled vectors: x86
//     decoding reads left to right, so a proper prefix of a complete
//     instruction always ends before the instruction does.
//
// Hand vectors cover byte patterns that no assembler emits (repeated and
// reordered prefixes, the 15-byte limit, opcodes invalid in 64-bit mode,
// vendor-dependent branch sizes, APX REX2); each carries its justification.
package main

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// filler is appended after the expected end of each valid instruction, so a
// decoder that reads too far returns a wrong length rather than running off
// the end of its input.
var filler = []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88}

// tmpl is one assembly template with what is declared about it.
type tmpl struct {
	cat    string // category, for counting and grouping
	asm    string // Intel syntax, with placeholders
	enc    string // expected decode.X86Encoding name
	mp     string // expected decode.X86Map name
	branch string // expected decode.BranchKind name; "" = not asserted
	vendor string // any, amd or intel
	pre    []byte // raw bytes prepended to the assembled encoding (hand rule)
	why    string // for pre: the manual rule fixing the length
	objOK  string // for pre: why an objdump disagreement is objdump's error
}

// vector is one output line.
type vector struct {
	cat     string
	vendor  string
	text    string // trailing comment
	input   []byte // all bytes given to the decoder
	length  int    // expected length; 0 for an error line
	err     string // truncated, invalid or toolong
	fields  []string
	note    string // comment line written before the vector
	objOK   string // an objdump disagreement is explained by this
	noObj   bool   // objdump cannot judge this line (APX, truncation)
	dropped string // reason the line became a comment
}

// main writes the vectors to standard output and progress to standard error.
func main() {
	log := bufio.NewWriter(os.Stderr)
	defer log.Flush()
	if err := run(os.Stdout, log); err != nil {
		log.Flush()
		fmt.Fprintln(os.Stderr, "x86vec:", err)
		os.Exit(1)
	}
}

// run assembles the templates, adds the derived and hand vectors, checks
// them against objdump and writes the file.
func run(out io.Writer, log io.Writer) error {
	ts := templates()
	asmVecs, err := assemble(ts, log)
	if err != nil {
		return err
	}
	vecs := append([]*vector{}, asmVecs...)
	vecs = append(vecs, truncations(asmVecs)...)
	vecs = append(vecs, handVectors()...)
	if err := crossCheck(vecs, log); err != nil {
		return err
	}
	return write(out, vecs, log)
}

// ---------------------------------------------------------------------------
// Placeholders.

// placeRE matches a placeholder: role, bits, optional scale, optional value pair.
var placeRE = regexp.MustCompile(`%([ijd])(8|16|32|64)(?:x([0-9]+))?(?:\(([^,)]+),([^)]+)\))?`)

// place is one placeholder occurrence in a template.
type place struct {
	role   byte // 'i' first immediate, 'j' second immediate, 'd' displacement
	size   int  // bytes
	v1, v2 string
}

// defaultValues returns two values of the given byte size that differ in
// every byte, scaled by n (for EVEX disp8*N).
func defaultValues(size int, n int64) (string, string) {
	switch size {
	case 1:
		return fmt.Sprintf("%#x", 0x11*n), fmt.Sprintf("%#x", 0x22*n)
	case 2:
		return "0x1234", "0x2345"
	case 4:
		return "0x12345678", "0x23456789"
	default:
		return "0x123456789abcdef0", "0x23456789abcdef01"
	}
}

// expand returns the template text with every placeholder at its first
// value, the placeholders, and one text per placeholder with that one
// switched to its second value.
func expand(asm string) (string, []place, []string) {
	locs := placeRE.FindAllStringSubmatchIndex(asm, -1)
	var ps []place
	for _, l := range locs {
		m := func(i int) string {
			if l[2*i] < 0 {
				return ""
			}
			return asm[l[2*i]:l[2*i+1]]
		}
		bits, _ := strconv.Atoi(m(2))
		p := place{role: m(1)[0], size: bits / 8}
		n := int64(1)
		if s := m(3); s != "" {
			n, _ = strconv.ParseInt(s, 10, 64)
		}
		p.v1, p.v2 = defaultValues(p.size, n)
		if m(4) != "" {
			p.v1, p.v2 = m(4), m(5)
		}
		ps = append(ps, p)
	}
	build := func(alt int) string {
		var b strings.Builder
		last := 0
		for i, l := range locs {
			b.WriteString(asm[last:l[0]])
			if i == alt {
				b.WriteString(ps[i].v2)
			} else {
				b.WriteString(ps[i].v1)
			}
			last = l[1]
		}
		b.WriteString(asm[last:])
		return b.String()
	}
	var alts []string
	for i := range ps {
		alts = append(alts, build(i))
	}
	return build(-1), ps, alts
}

// ---------------------------------------------------------------------------
// Running llvm-mc.

// encoding is llvm-mc's answer for one line.
type encoding struct {
	bytes  []byte // fixup bytes are 0
	fixups []fixup
	n      int // encoding lines seen (must be 1)
}

// fixup is a fixup line of llvm-mc: its byte offset and kind.
type fixup struct {
	off  int
	kind string
}

// Patterns for llvm-mc output lines.
var (
	encRE   = regexp.MustCompile(`encoding: \[([^\]]*)\]`)
	fixupRE = regexp.MustCompile(`fixup [A-Z] - offset: ([0-9]+), value: .*, kind: ([A-Za-z0-9_]+)`)
	labelRE = regexp.MustCompile(`^\.?L?(xv[0-9]+_[0-9]+):`)
)

// tool returns the program named by the environment variable env, or name.
func tool(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	return name
}

// llvmMC assembles lines, one instruction each, and returns the encoding of
// each (nil where llvm-mc rejected the line).
func llvmMC(lines []string) ([]*encoding, string, error) {
	var src strings.Builder
	src.WriteString(".intel_syntax noprefix\n")
	for i, l := range lines {
		fmt.Fprintf(&src, "xv%d_0:\n%s\n", i, l)
	}
	cmd := exec.Command(tool("LLVM_MC", "llvm-mc"), "-triple=x86_64", "-show-encoding", "-output-asm-variant=1")
	cmd.Stdin = strings.NewReader(src.String())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		return nil, "", fmt.Errorf("llvm-mc: %w", err)
	}
	res := make([]*encoding, len(lines))
	cur := -1
	for _, l := range strings.Split(stdout.String(), "\n") {
		if m := labelRE.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
			var a, b int
			fmt.Sscanf(m[1], "xv%d_%d", &a, &b)
			cur = a
			continue
		}
		if cur < 0 {
			continue
		}
		if m := encRE.FindStringSubmatch(l); m != nil {
			e := res[cur]
			if e == nil {
				e = &encoding{}
				res[cur] = e
			}
			e.n++
			for _, f := range strings.Split(m[1], ",") {
				f = strings.TrimSpace(f)
				if f == "" {
					continue
				}
				if strings.HasPrefix(f, "0x") {
					v, err := strconv.ParseUint(f[2:], 16, 8)
					if err != nil {
						return nil, "", fmt.Errorf("llvm-mc byte %q: %w", f, err)
					}
					e.bytes = append(e.bytes, byte(v))
				} else {
					// A fixup placeholder letter (A, B...) or a partial
					// byte written as A+0x2; the fixup fills it.
					e.bytes = append(e.bytes, 0)
				}
			}
			continue
		}
		if m := fixupRE.FindStringSubmatch(l); m != nil && res[cur] != nil {
			off, _ := strconv.Atoi(m[1])
			res[cur].fixups = append(res[cur].fixups, fixup{off, m[2]})
		}
	}
	return res, stderr.String(), nil
}

// fixupRole classifies an llvm-mc fixup kind: "rip", "rel1", "rel2",
// "rel4", or "" when it is not one the vectors may rely on.
func fixupRole(kind string) string {
	switch {
	case strings.HasPrefix(kind, "reloc_riprel_4byte"):
		return "rip"
	case kind == "FK_PCRel_1":
		return "rel1"
	case kind == "FK_PCRel_2":
		return "rel2"
	case kind == "FK_PCRel_4", kind == "reloc_branch_4byte_pcrel":
		return "rel4"
	}
	return ""
}

// job is a template being assembled: its base text, its placeholders and
// the texts with each placeholder's second value.
type job struct {
	t     tmpl
	base  string
	ps    []place
	alts  []string
	first int // index of the base text in the lines given to llvm-mc
}

// assemble turns templates into vectors.
func assemble(ts []tmpl, log io.Writer) ([]*vector, error) {
	var jobs []job
	var lines []string
	for _, t := range ts {
		base, ps, alts := expand(t.asm)
		jobs = append(jobs, job{t, base, ps, alts, len(lines)})
		lines = append(lines, base)
		lines = append(lines, alts...)
	}
	encs, stderr, err := llvmMC(lines)
	if err != nil {
		return nil, err
	}
	var bad []string
	var vecs []*vector
	for _, j := range jobs {
		be := encs[j.first]
		if be == nil || be.n != 1 {
			bad = append(bad, fmt.Sprintf("%q: llvm-mc gave no single encoding", j.base))
			continue
		}
		v := &vector{cat: j.t.cat, vendor: j.t.vendor, text: j.base, objOK: j.t.objOK}
		if len(j.t.pre) > 0 {
			v.text = fmt.Sprintf("[% x] %s", j.t.pre, j.base)
		}
		if v.vendor == "" {
			v.vendor = "any"
		}
		b := append([]byte(nil), be.bytes...)
		shift := len(j.t.pre)
		var fields []string
		hasRIP, hasRel := false, false
		fill := byte(0x40)
		for _, f := range be.fixups {
			role := fixupRole(f.kind)
			size := 4
			switch role {
			case "rip":
				hasRIP = true
				fields = append(fields, fmt.Sprintf("rip=%d", f.off+shift), fmt.Sprintf("disp=%d:4", f.off+shift))
			case "rel1", "rel2", "rel4":
				hasRel = true
				size = int(role[3] - '0')
				fields = append(fields, fmt.Sprintf("rel=%d:%d", f.off+shift, size))
			default:
				bad = append(bad, fmt.Sprintf("%q: unexpected fixup kind %s", j.base, f.kind))
			}
			for k := 0; k < size && f.off+k < len(b); k++ {
				b[f.off+k] = fill
				fill++
			}
		}
		pf, problem := placeholderFields(j, be, encs, shift)
		if problem != "" {
			bad = append(bad, problem)
			continue
		}
		fields = append(fields, pf...)
		if !hasRIP {
			fields = append(fields, "rip=-")
		}
		if !hasRel {
			fields = append(fields, "rel=-")
		}
		full := append(append([]byte(nil), j.t.pre...), b...)
		if err := checkEscape(full, j.t.enc, j.t.mp); err != nil {
			bad = append(bad, fmt.Sprintf("%q (% x): %v", j.base, full, err))
			continue
		}
		if j.t.branch != "" {
			fields = append(fields, "branch="+j.t.branch)
		}
		fields = append(fields, "enc="+j.t.enc, "map="+j.t.mp)
		sort.SliceStable(fields, func(a, b int) bool { return fieldOrder(fields[a]) < fieldOrder(fields[b]) })
		if len(j.t.pre) > 0 {
			v.note = j.t.why
			if len(full) > 15 {
				v.err = "toolong"
				v.input = append(full, filler...)
				v.fields = nil
				vecs = append(vecs, v)
				continue
			}
		}
		v.length = len(full)
		v.input = append(full, filler...)
		v.fields = fields
		vecs = append(vecs, v)
	}
	if len(bad) > 0 {
		fmt.Fprintf(log, "llvm-mc stderr:\n%s\n", stderr)
		return nil, fmt.Errorf("%d templates failed:\n  %s", len(bad), strings.Join(bad, "\n  "))
	}
	return vecs, nil
}

// placeholderFields finds the field of each placeholder of j: the bytes
// that change between the base encoding be and the encoding of the text
// with the placeholder's second value, which must be one run of the
// placeholder's size. problem says why a placeholder has no such field.
func placeholderFields(j job, be *encoding, encs []*encoding, shift int) (fields []string, problem string) {
	for pi, p := range j.ps {
		ae := encs[j.first+1+pi]
		if ae == nil || ae.n != 1 || len(ae.bytes) != len(be.bytes) {
			return nil, fmt.Sprintf("%q: second value changes the encoding", j.alts[pi])
		}
		lo, hi := -1, -1
		for k := range be.bytes {
			if be.bytes[k] != ae.bytes[k] {
				if lo < 0 {
					lo = k
				} else if hi != k-1 {
					lo = -2
					break
				}
				hi = k
			}
		}
		if lo < 0 || hi-lo+1 != p.size {
			return nil, fmt.Sprintf("%q: placeholder %d changes bytes %d..%d, want a %d-byte field", j.base, pi, lo, hi, p.size)
		}
		name := map[byte]string{'i': "imm", 'j': "imm2", 'd': "disp"}[p.role]
		fields = append(fields, fmt.Sprintf("%s=%d:%d", name, lo+shift, p.size))
	}
	return fields, ""
}

// order is the order of fields on a line.
var order = []string{"err", "rip", "disp", "imm", "imm2", "rel", "branch", "enc", "map"}

// fieldOrder returns the position of a key=value field in order.
func fieldOrder(f string) int {
	k, _, _ := strings.Cut(f, "=")
	for i, o := range order {
		if o == k {
			return i
		}
	}
	return len(order)
}

// checkEscape verifies the declared encoding scheme and map against the
// escape bytes, skipping legacy prefixes and REX. It guards the generator's
// declarations; it does not decode the instruction.
func checkEscape(b []byte, enc, mp string) error {
	i := 0
	for i < len(b) && isLegacyPrefix(b[i]) {
		i++
	}
	if enc == "rex2" {
		return nil
	}
	for i < len(b) && b[i]&0xf0 == 0x40 {
		i++
	}
	got := ""
	gotMap := ""
	switch {
	case i+1 < len(b) && b[i] == 0xc5:
		got, gotMap = "vex2", "0f"
	case i+2 < len(b) && b[i] == 0xc4:
		got = "vex3"
		gotMap = map[byte]string{1: "0f", 2: "0f38", 3: "0f3a"}[b[i+1]&0x1f]
	case i+3 < len(b) && b[i] == 0x62:
		got = "evex"
		gotMap = map[byte]string{1: "0f", 2: "0f38", 3: "0f3a", 5: "map5", 6: "map6"}[b[i+1]&0x07]
	case i+2 < len(b) && b[i] == 0x8f && b[i+1]&0x1f >= 8:
		got = "xop"
		gotMap = map[byte]string{8: "xop8", 9: "xop9", 10: "xopa"}[b[i+1]&0x1f]
	case i+1 < len(b) && b[i] == 0x0f && b[i+1] == 0x0f:
		got, gotMap = "3dnow", "3dnow"
	case i+1 < len(b) && b[i] == 0x0f && b[i+1] == 0x38:
		got, gotMap = "legacy", "0f38"
	case i+1 < len(b) && b[i] == 0x0f && b[i+1] == 0x3a:
		got, gotMap = "legacy", "0f3a"
	case i < len(b) && b[i] == 0x0f:
		got, gotMap = "legacy", "0f"
	default:
		got, gotMap = "legacy", "1byte"
	}
	if got != enc || gotMap != mp {
		return fmt.Errorf("declared enc=%s map=%s, bytes say enc=%s map=%s", enc, mp, got, gotMap)
	}
	return nil
}

// isLegacyPrefix reports whether c is one of the eleven legacy prefixes.
func isLegacyPrefix(c byte) bool {
	switch c {
	case 0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3:
		return true
	}
	return false
}

// truncations derives ErrTruncated vectors from assembled ones: the last
// byte cut off, and a cut at a second point chosen from the line number.
func truncations(vs []*vector) []*vector {
	var out []*vector
	for i, v := range vs {
		if v.err != "" || v.length < 2 {
			continue
		}
		cuts := map[int]bool{}
		if i%3 == 0 {
			cuts[v.length-1] = true
		}
		if i%5 == 1 {
			cuts[1+(i*7)%(v.length-1)] = true
		}
		special := v.cat == "vex" || v.cat == "evex" || v.cat == "xop" || v.cat == "3dnow" || v.cat == "moffs" || v.cat == "prefix"
		if special && i%2 == 0 {
			cuts[1+(i*3)%(v.length-1)] = true
		}
		keys := make([]int, 0, len(cuts))
		for k := range cuts {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			out = append(out, &vector{
				cat:    "truncated",
				vendor: v.vendor,
				text:   fmt.Sprintf("first %d of %d bytes of: %s", k, v.length, v.text),
				input:  append([]byte(nil), v.input[:k]...),
				err:    "truncated",
				noObj:  true,
			})
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The objdump cross-check.

// objLineRE matches an instruction line of objdump -w: address, bytes, text.
var objLineRE = regexp.MustCompile(`^\s*([0-9a-f]+):\t([0-9a-f]{2}(?: [0-9a-f]{2})*)\s*(?:\t(.*))?$`)

// objInsn is one instruction as objdump printed it.
type objInsn struct {
	n    int
	text string
}

// objdump disassembles blob as raw 64-bit code and returns the instructions
// keyed by offset.
func objdump(blob []byte, mode string) (map[int]objInsn, error) {
	f, err := os.CreateTemp("", "x86vec-*.bin")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(blob); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	args := []string{"-D", "-b", "binary", "-m", "i386:x86-64", "-w", "-z"}
	if mode != "" {
		args = append(args, "-M", mode)
	}
	args = append(args, f.Name())
	out, err := exec.Command(tool("OBJDUMP", "objdump"), args...).Output()
	if err != nil {
		return nil, fmt.Errorf("objdump: %w", err)
	}
	res := map[int]objInsn{}
	last := -1
	for _, l := range strings.Split(string(out), "\n") {
		m := objLineRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		addr, _ := strconv.ParseInt(m[1], 16, 64)
		n := (len(m[2]) + 1) / 3
		if m[3] == "" && last >= 0 {
			// A continuation line of a wrapped instruction.
			in := res[last]
			in.n += n
			res[last] = in
			continue
		}
		res[int(addr)] = objInsn{n, m[3]}
		last = int(addr)
	}
	return res, nil
}

// crossCheck compares every vector with objdump and marks disagreements.
func crossCheck(vs []*vector, log io.Writer) error {
	var blob []byte
	starts := make([]int, len(vs))
	for i, v := range vs {
		starts[i] = len(blob)
		if v.err == "truncated" {
			continue
		}
		n := v.length
		if v.err != "" {
			n = len(v.input)
		}
		blob = append(blob, v.input[:n]...)
		for k := 0; k < 16; k++ {
			blob = append(blob, 0x90)
		}
	}
	amd, err := objdump(blob, "")
	if err != nil {
		return err
	}
	intel, err := objdump(blob, "intel64")
	if err != nil {
		return err
	}
	for i, v := range vs {
		if v.noObj || v.err == "truncated" {
			continue
		}
		var modes []map[int]objInsn
		var names []string
		switch v.vendor {
		case "amd":
			modes, names = []map[int]objInsn{amd}, []string{"amd64"}
		case "intel":
			modes, names = []map[int]objInsn{intel}, []string{"intel64"}
		default:
			modes, names = []map[int]objInsn{amd, intel}, []string{"amd64", "intel64"}
		}
		for k, m := range modes {
			in, ok := m[starts[i]]
			var problem string
			switch {
			case !ok:
				problem = "objdump has no instruction at this offset"
			case v.err == "invalid":
				if !strings.Contains(in.text, "(bad)") && !strings.HasPrefix(in.text, ".byte") {
					problem = fmt.Sprintf("objdump decodes %d bytes as %q", in.n, in.text)
				}
			case v.err == "toolong":
				if in.n > 15 {
					problem = fmt.Sprintf("objdump decodes %d bytes", in.n)
				} else if in.n == len(v.input)-len(filler) {
					problem = fmt.Sprintf("objdump decodes all %d bytes as one instruction", in.n)
				}
			case in.n != v.length || strings.Contains(in.text, "(bad)"):
				problem = fmt.Sprintf("objdump (%s) decodes %d bytes as %q", names[k], in.n, in.text)
			}
			if problem == "" {
				continue
			}
			if v.objOK != "" {
				v.note = strings.TrimSpace(v.note + " objdump differs (" + problem + "): " + v.objOK)
				break
			}
			if r := dropReason(v); r != "" {
				v.dropped = problem + "; " + r
			} else {
				v.dropped = problem
				fmt.Fprintf(log, "unexplained objdump disagreement: %s (% x): %s\n", v.text, v.input, problem)
			}
			break
		}
	}
	return nil
}

// dropReason explains known llvm-mc/objdump disagreements.
func dropReason(v *vector) string {
	for _, r := range dropReasons {
		if strings.Contains(v.text, r[0]) {
			return r[1]
		}
	}
	return ""
}

// dropReasons maps a piece of template text to the reason llvm-mc and
// objdump disagree about it.
var dropReasons = [][2]string{
	{"qword ptr gs:[0x123456789abcdef0]", "llvm-mc 14 puts REX.W before the 65 prefix, where the CPU ignores it (Intel SDM Vol. 2A §2.2.1), so the bytes mean mov eax, not rax; objdump prints the REX apart"},
}

// ---------------------------------------------------------------------------
// Output.

// write prints the header, the counts and every vector, dropped ones as
// comments.
func write(out io.Writer, vs []*vector, log io.Writer) error {
	w := bufio.NewWriter(out)
	counts := map[string]int{}
	var cats []string
	dropped := 0
	for _, v := range vs {
		if v.dropped != "" {
			dropped++
			continue
		}
		if counts[v.cat] == 0 {
			cats = append(cats, v.cat)
		}
		counts[v.cat]++
	}
	total := 0
	for _, c := range cats {
		total += counts[c]
	}
	fmt.Fprint(w, header)
	fmt.Fprintf(w, "# %d vectors", total)
	for _, c := range cats {
		fmt.Fprintf(w, ", %s %d", c, counts[c])
	}
	fmt.Fprintf(w, "; %d dropped (commented) where objdump disagreed.\n", dropped)
	last, lastNote := "", ""
	for _, v := range vs {
		if v.cat != last {
			fmt.Fprintf(w, "\n# --- %s ---\n", v.cat)
			last, lastNote = v.cat, ""
		}
		if v.note != "" && v.note != lastNote {
			fmt.Fprintf(w, "# %s\n", v.note)
		}
		lastNote = v.note
		line := formatVector(v)
		if v.dropped != "" {
			fmt.Fprintf(w, "# dropped: %s\n#   %s\n", v.dropped, line)
			continue
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(log, "x86vec: %d vectors, %d dropped\n", total, dropped)
	for _, c := range cats {
		fmt.Fprintf(log, "  %-12s %d\n", c, counts[c])
	}
	return w.Flush()
}

// formatVector renders one vector line.
func formatVector(v *vector) string {
	var h string
	if v.err != "" {
		h = hex.EncodeToString(v.input)
	} else {
		h = hex.EncodeToString(v.input[:v.length]) + "|" + hex.EncodeToString(v.input[v.length:])
	}
	fields := v.fields
	if v.err != "" {
		fields = append([]string{"err=" + v.err}, fields...)
	}
	return fmt.Sprintf("%s\t%s\t%s\t# %s", h, v.vendor, strings.Join(fields, " "), v.text)
}

const header = `# x86-64 decoder test vectors. Generated by decode/internal/x86vec; do not edit.
# Regenerate: go run ./decode/internal/x86vec > decode/testdata/x86.txt
#
# Format, one vector a line, tab-separated:
#   <hex>	<vendor>	<fields>	# <assembly or description>
# hex: the decoder's input. For a valid instruction a '|' marks the expected
#   length; the bytes after it are filler that must not be consumed. An error
#   line has no '|' and the whole hex is the input.
# vendor: any (decode with both decode.VendorAMD and decode.VendorIntel),
#   amd or intel (decode with that vendor only).
# fields, space-separated key=value, each checked when present:
#   err=truncated|invalid|toolong  the decoder must fail with ErrTruncated,
#                                  ErrInvalid or ErrTooLong
#   rip=N       RIPRel is set and the disp32 is at offset N; rip=- RIPRel unset
#   disp=O:S    DispOff, DispSize
#   imm=O:S     ImmOff, ImmSize;  imm2=O:S  Imm2Off, Imm2Size
#   rel=O:S     RelOff, RelSize of a relative branch; rel=- RelSize is 0
#   branch=K    Branch.String()
#   enc=E       Encoding.String();  map=M  Map.String()
# Every vector is decoded at address 0; branch and RIP-relative targets are
# not asserted here.
# Expected values come from llvm-mc (bytes, fixups, immediate and
# displacement positions found by assembling two values), checked against
# GNU objdump; hand vectors cite the manual rule above them.
`

// ---------------------------------------------------------------------------
// Templates.

// group declares what a list of templates shares.
type group struct {
	cat, enc, mp, branch, vendor string
}

// add appends one template per assembly line, with the group's declarations.
func (g group) add(ts *[]tmpl, asms ...string) {
	for _, a := range asms {
		*ts = append(*ts, tmpl{cat: g.cat, asm: a, enc: g.enc, mp: g.mp, branch: g.branch, vendor: g.vendor})
	}
}

// memForms64 are memory operands covering every ModRM/SIB shape with 64-bit
// addressing: mod 0/1/2, rm=4 (SIB), rm=5 with mod 0 (RIP-relative), SIB
// base=5 with mod 0 (no base), index=4 (no index), REX.B/REX.X registers.
// %dN is replaced by a scaled placeholder for EVEX.
var memForms64 = []string{
	"[rax]",
	"[rcx + %d8]",
	"[rdx + %d32]",
	"[rsp]",
	"[rsp + %d8]",
	"[rbp]",
	"[rbp + %d32]",
	"[r12]",
	"[r13]",
	"[r13 + %d8]",
	"[rax + rbx*4]",
	"[rax + rbx*8 + %d8]",
	"[rsi + rdi*2 + %d32]",
	"[rbx*4 + %d32]",
	"[rbp + rcx*2]",
	"[%d32]",
	"[rip + sym]",
	"[r8 + r9*2 + %d8]",
	"[r15 + r14*8 + %d32]",
	"[rax + r12*2]",
	"[rsp + rax]",
	"[r12 + r13 + %d8]",
	"[r13*8 + %d32]",
}

// memForms32 are the same shapes with 32-bit addressing (a 67 prefix).
var memForms32 = []string{
	"[eax]",
	"[ecx + %d8]",
	"[esp + %d32]",
	"[ebp]",
	"[eax + ebx*4 + %d8]",
	"[ebx*8 + %d32]",
	"[r8d + r9d*2]",
	"[eip + sym]",
	"[r13d + %d8]",
}

// segForms add segment overrides.
var segForms = []string{
	"fs:[rax + %d8]",
	"gs:[%d32]",
	"es:[rbx]",
	"ss:[rsp + %d8]",
	"cs:[rip + sym]",
	"ds:[rdx]",
}

// allMem returns every memory operand form.
func allMem() []string {
	return append(append(append([]string{}, memForms64...), memForms32...), segForms...)
}

// scaled rewrites a memory form for an EVEX operand of n bytes: %d8
// becomes %d8xN so that the two values stay compressible.
func scaled(m string, n int) string {
	return strings.ReplaceAll(m, "%d8", fmt.Sprintf("%%d8x%d", n))
}

// The groups of templates most often used: legacy instructions of the
// one-byte, 0F, 0F38 and 0F3A maps, neither branches nor vendor-specific.
var (
	grpOne  = group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "none"}
	grp0F   = group{cat: "0f", enc: "legacy", mp: "0f", branch: "none"}
	grp0F38 = group{cat: "0f38", enc: "legacy", mp: "0f38", branch: "none"}
	grp0F3A = group{cat: "0f3a", enc: "legacy", mp: "0f3a", branch: "none"}
)

// templates lists every assembled vector.
func templates() []tmpl {
	var ts []tmpl
	for _, part := range []func() []tmpl{modrmTemplates, legacyTemplates, map0FTemplates, vectorTemplates, newerTemplates} {
		ts = append(ts, part()...)
	}
	// Prefixes: llvm-mc assembles the base instruction; the prefix bytes
	// are prepended. A legacy prefix is one byte, so each adds one to the
	// length (Intel SDM Vol. 2A §2.1.1; AMD APM Vol. 3 §1.2), and an
	// instruction longer than 15 bytes raises #GP (Intel SDM Vol. 2A §2.1:
	// "at most 15 bytes"; AMD APM Vol. 3 §1.1).
	ts = append(ts, prefixTemplates()...)
	return ts
}

// modrmTemplates lists the ModRM and SIB forms and the REX combinations.
func modrmTemplates() (ts []tmpl) {
	// ModRM/SIB forms across a few opcode shapes and maps.
	modrm := group{cat: "modrm", enc: "legacy", mp: "1byte", branch: "none"}
	modrm0f := group{cat: "modrm", enc: "legacy", mp: "0f", branch: "none"}
	modrm38 := group{cat: "modrm", enc: "legacy", mp: "0f38", branch: "none"}
	modrm3a := group{cat: "modrm", enc: "legacy", mp: "0f3a", branch: "none"}
	for _, m := range allMem() {
		modrm.add(&ts,
			"add dword ptr "+m+", ecx",
			"mov rax, qword ptr "+m,
			"mov byte ptr "+m+", %i8",
			"mov word ptr "+m+", %i16",
			"mov qword ptr "+m+", %i32",
			"test dword ptr "+m+", %i32",
			"imul r9d, dword ptr "+m+", %i8",
			"lea rdx, "+m,
		)
		modrm0f.add(&ts,
			"movups xmm1, xmmword ptr "+m,
			"pshufd xmm10, xmmword ptr "+m+", %i8",
		)
		modrm38.add(&ts, "pshufb xmm3, xmmword ptr "+m)
		modrm3a.add(&ts, "roundps xmm4, xmmword ptr "+m+", %i8")
	}
	for _, m := range memForms64 {
		if m == "[%d32]" {
			// llvm-mc 14 reads "call qword ptr [abs]" as a direct call.
			m = "[rbx*4 + %d32]"
		}
		group{cat: "modrm", enc: "legacy", mp: "1byte", branch: "call-indirect"}.add(&ts, "call qword ptr "+m)
		group{cat: "modrm", enc: "legacy", mp: "1byte", branch: "jmp-indirect"}.add(&ts, "jmp qword ptr "+m)
		modrm.add(&ts, "fadd dword ptr "+m, "inc qword ptr "+m,
			"cmp qword ptr "+m+", %i8", "xor r11d, dword ptr "+m, "push qword ptr "+m)
		modrm0f.add(&ts, "movzx ecx, word ptr "+m, "cmovne rax, qword ptr "+m)
	}

	// REX: every W/R/X/B combination.
	rex := group{cat: "rex", enc: "legacy", mp: "1byte", branch: "none"}
	for w := 0; w < 2; w++ {
		for r := 0; r < 2; r++ {
			for x := 0; x < 2; x++ {
				for b := 0; b < 2; b++ {
					regs := [2][2]string{{"ecx", "r9d"}, {"rcx", "r9"}}
					reg := regs[w][r]
					base := []string{"rsi", "r11"}[b]
					index := []string{"rdx", "r10"}[x]
					rex.add(&ts,
						fmt.Sprintf("add %s, [%s + %s*2 + %%d8]", reg, base, index),
						fmt.Sprintf("add dword ptr [%s + %s*8], %s", base, index, strings.Replace(regs[0][r], "r", "e", 0)),
					)
					rex.add(&ts, fmt.Sprintf("imul %s, %s, %%i32", reg, []string{regs[w][0], regs[w][1]}[b]))
				}
			}
		}
	}
	rex.add(&ts, "mov sil, dil", "mov spl, al", "add bpl, %i8", "xchg r8d, eax", "xchg r8, rax", "push r12",
		"pop r15", "mov r14b, %i8", "movabs r15, %i64", "mov r11d, %i32", "mov r11w, %i16",
		"inc r13b", "movsxd r8, dword ptr [r9]", "movsxd rax, ecx")
	group{cat: "rex", enc: "legacy", mp: "0f", branch: "none"}.add(&ts, "bswap r10", "movzx r9, byte ptr [r10 + r11]",
		"cmovne r12, qword ptr [r13 + %d8]", "movq xmm9, r10", "movd r8d, xmm12", "cvtsi2sd xmm8, rax", "setne r9b")
	return ts
}

// legacyTemplates lists the one-byte opcodes, moffs and the relative branches.
func legacyTemplates() (ts []tmpl) {
	// Legacy one-byte opcodes.
	for _, op := range []string{"add", "or", "adc", "sbb", "and", "sub", "xor", "cmp"} {
		grpOne.add(&ts,
			op+" byte ptr [rcx + %d8], dl",
			op+" dword ptr [rcx], edx",
			op+" dl, byte ptr [rcx]",
			op+" edx, dword ptr [rcx + %d32]",
			op+" al, %i8",
			op+" eax, %i32",
			op+" ax, %i16",
			op+" rax, %i32",
			op+" ecx, %i32",
			op+" cx, %i16",
			op+" rcx, %i8",
			op+" byte ptr [rip + sym], %i8",
			op+" qword ptr [rip + sym], %i32",
			op+" word ptr [rip + sym], %i16",
			op+" dword ptr [rip + sym], %i8",
		)
	}
	grpOne.add(&ts,
		"push rax", "push rbx", "pop rcx", "push %i8", "push %i32", "push qword ptr [rax]", "pop qword ptr [rbx + %d8]",
		"imul eax, ecx, %i32", "imul ax, cx, %i16", "imul rax, qword ptr [rip + sym], %i32", "imul eax, dword ptr [rip + sym], %i8",
		"insb byte ptr es:[rdi], dx", "insd dword ptr es:[rdi], dx", "outsb dx, byte ptr [rsi]", "outsw dx, word ptr [rsi]",
		"test byte ptr [rax], dl", "test rcx, rdx", "xchg byte ptr [rax], cl", "xchg qword ptr [rip + sym], rdx",
		"mov byte ptr [rax], cl", "mov dword ptr [rip + sym], ecx", "mov cl, byte ptr [rdx]", "mov rcx, qword ptr [rip + sym]",
		"mov eax, ds", "mov word ptr [rax], fs", "mov ds, eax", "mov es, word ptr [rax]",
		"lea rax, [rip + sym]", "lea eax, [rbx + rcx*8 + %d32]",
		"nop", "pause", "xchg eax, ecx", "xchg ax, dx", "cbw", "cwde", "cdqe", "cwd", "cdq", "cqo",
		"wait", "pushfq", "popfq", "pushf", "sahf", "lahf",
		"movsb byte ptr es:[rdi], byte ptr [rsi]", "movsq qword ptr es:[rdi], qword ptr [rsi]",
		"cmpsb byte ptr [rsi], byte ptr es:[rdi]", "stosb byte ptr es:[rdi], al", "stosq qword ptr es:[rdi], rax",
		"lodsb al, byte ptr [rsi]", "lodsw ax, word ptr [rsi]", "scasb al, byte ptr es:[rdi]", "scasd eax, dword ptr es:[rdi]",
		"rep movsb byte ptr es:[rdi], byte ptr [rsi]", "rep stosq qword ptr es:[rdi], rax", "repne scasb al, byte ptr es:[rdi]",
		"test al, %i8", "test eax, %i32", "test ax, %i16", "test rax, %i32",
		"mov cl, %i8", "mov ah, %i8", "mov ecx, %i32", "mov cx, %i16", "movabs rcx, %i64", "mov rcx, %i32", "mov edi, %i32",
		"rol byte ptr [rax], %i8", "shl ecx, %i8", "sar rdx, %i8", "shr dword ptr [rip + sym], %i8", "ror word ptr [rbx + %d8], %i8",
		"rcl eax, 1", "rcr byte ptr [rax], 1", "shl eax, cl", "sar byte ptr [rcx], cl", "sal qword ptr [rip + sym], 1",
		"mov byte ptr [rip + sym], %i8", "mov dword ptr [rip + sym], %i32", "mov word ptr [rip + sym], %i16", "mov qword ptr [rip + sym], %i32",
		"mov eax, %i32", "mov ax, %i16",
		"enter %i16, %j8", "leave", "enter %i16(0x1234,0x2345), 0",
		"in al, %i8", "in eax, %i8", "out %i8, al", "out %i8, eax", "in al, dx", "in ax, dx", "out dx, al", "out dx, eax",
		"cmc", "clc", "stc", "cli", "sti", "cld", "std",
		"test byte ptr [rax], %i8", "test dword ptr [rcx + %d8], %i32", "test word ptr [rdx], %i16", "test qword ptr [rip + sym], %i32",
		"test cl, %i8", "test r9d, %i32",
		"not byte ptr [rax]", "neg dword ptr [rip + sym]", "mul rcx", "imul byte ptr [rax]", "div dword ptr [rax + %d8]", "idiv qword ptr [rax + rbx*4]",
		"not ecx", "neg word ptr [rax]", "mul byte ptr [rip + sym]", "div cl",
		"inc byte ptr [rax]", "dec cl", "inc dword ptr [rip + sym]", "dec rax", "inc ax",
		"fadd st, st(1)", "fld tbyte ptr [rax]", "fnstsw ax", "fld qword ptr [rip + sym]", "fistp word ptr [rax]",
		"fild qword ptr [rbx + %d8]", "fmul dword ptr [rcx]", "fxch st(3)", "fcomip st, st(1)", "fstp st(1)",
		"fldz", "fld1", "fsin", "fnstcw word ptr [rax]", "fbld tbyte ptr [rax]", "fisttp dword ptr [rax]", "fnsave [rax]",
		"xlatb",
	)
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "ret"}.add(&ts, "ret")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "ret-imm"}.add(&ts, "ret %i16")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "far-ret"}.add(&ts, "retf", "retf %i16")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "int"}.add(&ts, "int3", "int %i8")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "iret"}.add(&ts, "iretq", "iret", "iretd")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "far-call"}.add(&ts, "call fword ptr [rax]", "call fword ptr [rip + sym]")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "far-jmp"}.add(&ts, "jmp fword ptr [rbx + %d8]", "jmp fword ptr [rip + sym]")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "call-indirect"}.add(&ts, "call rax", "call r11", "call qword ptr [rip + sym]")
	group{cat: "onebyte", enc: "legacy", mp: "1byte", branch: "jmp-indirect"}.add(&ts, "jmp rax", "jmp r11", "jmp qword ptr [rip + sym]", "jmp qword ptr [rax + rcx*8 + %d32]")
	group{cat: "onebyte", enc: "legacy", mp: "1byte"}.add(&ts, "hlt")

	// moffs: A0-A3 take an 8-byte address (a 4-byte one under 67, see the
	// hand vectors).
	moffs := group{cat: "moffs", enc: "legacy", mp: "1byte", branch: "none"}
	moffs.add(&ts,
		"movabs al, byte ptr [%d64]", "movabs eax, dword ptr [%d64]", "movabs ax, word ptr [%d64]", "movabs rax, qword ptr [%d64]",
		"movabs byte ptr [%d64], al", "movabs dword ptr [%d64], eax", "movabs qword ptr [%d64], rax",
		"movabs al, byte ptr fs:[%d64]", "movabs rax, qword ptr gs:[%d64]",
	)

	// Relative branches.
	br := func(kind string, asms ...string) {
		group{cat: "branch", enc: "legacy", mp: "1byte", branch: kind}.add(&ts, asms...)
	}
	br0f := func(kind string, asms ...string) {
		group{cat: "branch", enc: "legacy", mp: "0f", branch: kind}.add(&ts, asms...)
	}
	br("jmp", "jmp sym", "{disp32} jmp sym")
	group{cat: "branch", enc: "legacy", mp: "1byte", branch: "jmp-indirect"}.add(&ts, "notrack jmp rax", "notrack jmp qword ptr [rip + sym]")
	br("call", "call sym")
	for _, cc := range []string{"o", "no", "b", "ae", "e", "ne", "be", "a", "s", "ns", "p", "np", "l", "ge", "le", "g"} {
		br("jcc", "j"+cc+" sym")
		br0f("jcc", "{disp32} j"+cc+" sym")
	}
	br("loop", "loop sym", "loope sym", "loopne sym", "jrcxz sym", "jecxz sym")
	group{cat: "branch", enc: "legacy", mp: "1byte", branch: "xbegin"}.add(&ts, "xbegin sym")
	group{cat: "branch", enc: "legacy", mp: "0f", branch: "syscall"}.add(&ts, "syscall", "sysenter")
	group{cat: "branch", enc: "legacy", mp: "0f", branch: "iret"}.add(&ts, "sysretq", "sysexitq", "sysret", "sysexit")
	// 2E/3E before Jcc are branch hints and F2 before a branch is BND;
	// llvm-mc does not take them with a symbol, so they are prepended.
	for _, c := range []struct {
		pre  byte
		asm  string
		kind string
		mp   string
	}{{0x3e, "je sym", "jcc", "1byte"}, {0x2e, "{disp32} jne sym", "jcc", "0f"}, {0xf2, "jmp sym", "jmp", "1byte"},
		{0xf2, "call sym", "call", "1byte"}, {0xf2, "{disp32} jmp sym", "jmp", "1byte"}, {0x3e, "call sym", "call", "1byte"}} {
		ts = append(ts, tmpl{cat: "branch", asm: c.asm, enc: "legacy", mp: c.mp, branch: c.kind, pre: []byte{c.pre},
			why: fmt.Sprintf("prefix %02x before a near branch (hint or BND) adds one byte (Intel SDM Vol. 2A §2.1.1)", c.pre)})
	}
	return ts
}

// map0FTemplates lists the 0F map (SSE, system, AMD-only and VIA forms) and 3DNow!.
func map0FTemplates() (ts []tmpl) {
	// 0F map.
	grp0F.add(&ts,
		"cpuid", "rdtsc", "rdtscp", "rdpmc", "rdmsr", "wrmsr", "xgetbv", "xsetbv",
		"lfence", "mfence", "sfence", "emms", "femms", "clts", "invd", "wbinvd", "swapgs",
		"clflush byte ptr [rax]", "clflushopt byte ptr [rip + sym]", "clwb byte ptr [rax + %d8]",
		"prefetcht0 byte ptr [rax]", "prefetcht1 byte ptr [rip + sym]", "prefetchnta byte ptr [rbx + %d32]", "prefetchw byte ptr [rax]", "prefetch byte ptr [rax]",
		"nop dword ptr [rax + rax + %d8]", "nop word ptr cs:[rax + rax + %d32]", "nop eax",
		"bt eax, ecx", "bts dword ptr [rax], %i8", "btr rax, %i8", "btc qword ptr [rip + sym], %i8", "bt word ptr [rax], cx",
		"shld eax, ecx, %i8", "shrd qword ptr [rax], rcx, %i8", "shld eax, ecx, cl", "shrd dword ptr [rip + sym], edx, %i8",
		"cmpxchg dword ptr [rax], ecx", "lock cmpxchg qword ptr [rip + sym], rdx", "cmpxchg8b qword ptr [rax]", "cmpxchg16b xmmword ptr [rax]",
		"xadd byte ptr [rax], cl", "lock xadd qword ptr [rax], rcx",
		"movzx eax, byte ptr [rax]", "movzx ecx, word ptr [rip + sym]", "movsx rax, byte ptr [rbx]", "movsx eax, cx",
		"popcnt eax, ecx", "lzcnt rax, qword ptr [rax]", "tzcnt ecx, dword ptr [rip + sym]", "bsf eax, ecx", "bsr rax, qword ptr [rax]",
		"rdrand eax", "rdseed rax", "rdpid rax", "movnti dword ptr [rax], ecx", "lar eax, word ptr [rax]", "lsl eax, ecx",
		"sldt word ptr [rax]", "str eax", "lldt word ptr [rax]", "verr word ptr [rax]",
		"sgdt [rax]", "sidt [rip + sym]", "lgdt [rax]", "lidt [rax]", "smsw eax", "lmsw word ptr [rax]", "invlpg byte ptr [rax]",
		"mov cr0, rax", "mov rax, cr3", "mov cr8, rcx", "mov rax, dr7", "mov dr0, rcx",
		"xsave [rax]", "xrstor [rax]", "xsaveopt [rax]", "xsavec [rip + sym]", "xsaves [rax]", "xrstors [rax]", "xsave64 [rax]",
		"fxsave [rax]", "fxrstor64 [rax]", "ldmxcsr dword ptr [rax]", "stmxcsr dword ptr [rip + sym]",
		"vmxoff", "vmread rax, rcx", "vmwrite rax, qword ptr [rax]", "vmptrld qword ptr [rax]",
		"vmclear qword ptr [rax]", "vmxon qword ptr [rax]",
		"monitor", "mwait", "push fs", "pop gs", "bswap r10",
		"clac", "stac", "xend", "xtest", "wrpkru", "rdpkru",
		"ptwrite dword ptr [rax]", "ptwrite rax",
	)
	// AMD-only system instructions: an Intel CPU raises #UD for them, so
	// the decoder with Intel rules must reject them.
	group{cat: "0f", enc: "legacy", mp: "0f", branch: "none", vendor: "amd"}.add(&ts,
		"monitorx", "mwaitx", "clzero", "invlpga", "vmload", "vmsave", "stgi", "clgi",
		"psmash", "rmpupdate", "pvalidate", "rmpadjust", "invlpgb", "tlbsync")
	group{cat: "0f", enc: "legacy", mp: "0f", vendor: "amd"}.add(&ts, "vmrun", "vmmcall", "skinit")
	// Traps, exits to another privilege level and undefined opcodes: the
	// branch kind is not asserted, since the BranchKind list leaves it open.
	group{cat: "0f", enc: "legacy", mp: "0f"}.add(&ts, "ud2", "ud1 eax, dword ptr [rax]", "rsm", "getsec", "vmcall", "vmlaunch",
		"vmresume", "vmfunc", "encls", "enclu", "enclv")
	for _, cc := range []string{"o", "b", "e", "ne", "a", "s", "l", "g"} {
		grp0F.add(&ts, "cmov"+cc+" eax, ecx", "cmov"+cc+" rax, qword ptr [rip + sym]", "set"+cc+" al", "set"+cc+" byte ptr [rax + %d8]")
	}
	group{cat: "0f", enc: "legacy", mp: "1byte", branch: "none"}.add(&ts, "xabort %i8")
	// VIA PadLock: objdump decodes these in both modes and real binaries
	// (OpenSSL's engines) contain them.
	grp0F.add(&ts, "xstorerng", "xcryptecb", "xcryptcbc", "xcryptctr", "xcryptcfb", "xcryptofb", "xsha1", "xsha256", "montmul", "rep xstorerng")
	// SSE families in 0F, with and without mandatory prefixes, MMX forms.
	sse0f := []string{
		"movups xmm1, xmm2", "movupd xmm1, xmmword ptr [rax]", "movss xmm1, dword ptr [rax]", "movsd xmm1, qword ptr [rip + sym]",
		"movaps xmm1, xmm2", "movapd xmmword ptr [rax], xmm1", "movhlps xmm1, xmm2", "movlhps xmm1, xmm2", "unpcklps xmm1, xmm2",
		"andps xmm1, xmm2", "andnps xmm1, xmm2", "orps xmm1, xmm2", "xorps xmm1, xmm2", "addps xmm1, xmm2", "addss xmm1, xmm2",
		"addpd xmm1, xmm2", "addsd xmm1, xmm2", "mulps xmm1, xmm2", "subps xmm1, xmm2", "minps xmm1, xmm2", "divps xmm1, xmm2",
		"maxps xmm1, xmm2", "sqrtps xmm1, xmm2", "rsqrtps xmm1, xmm2", "rcpps xmm1, xmm2", "cvtps2pd xmm1, xmm2", "cvtdq2ps xmm1, xmm2",
		"cvttps2dq xmm1, xmm2", "punpcklbw xmm1, xmm2", "packsswb xmm1, xmm2", "pcmpgtb xmm1, xmm2", "paddb xmm1, xmm2",
		"psubb xmm1, xmm2", "pmullw xmm1, xmm2", "pmaddwd xmm1, xmm2", "pavgb xmm1, xmm2", "pminub xmm1, xmm2", "pmaxub xmm1, xmm2",
		"psadbw xmm1, xmm2", "pshufd xmm1, xmm2, %i8", "pshufhw xmm1, xmm2, %i8", "pshuflw xmm1, xmm2, %i8",
		"psrlw xmm1, %i8", "psraw xmm1, %i8", "psllw xmm1, %i8", "psrldq xmm1, %i8", "pslldq xmm1, %i8", "psrlq xmm1, %i8",
		"pcmpeqb xmm1, xmm2", "movd xmm1, eax", "movq xmm1, rax", "movd eax, xmm1", "movq rax, xmm1", "movq xmm1, xmm2",
		"movdqa xmm1, xmmword ptr [rax]", "movdqu xmm1, xmmword ptr [rip + sym]", "movntdq xmmword ptr [rax], xmm1",
		"cmpps xmm1, xmm2, %i8(3,5)", "cmpsd xmm1, xmm2, %i8(3,5)", "shufps xmm1, xmm2, %i8", "shufpd xmm1, xmm2, %i8",
		"pinsrw xmm1, eax, %i8", "pextrw eax, xmm1, %i8", "pmovmskb eax, xmm1", "movmskps eax, xmm1",
		"cvtsi2sd xmm1, rax", "cvttsd2si eax, xmm1", "cvtsd2si rax, qword ptr [rax]", "comiss xmm1, xmm2", "ucomisd xmm1, qword ptr [rip + sym]",
		"haddps xmm1, xmm2", "movddup xmm1, xmm2", "lddqu xmm1, xmmword ptr [rax]", "addsubps xmm1, xmm2", "maskmovdqu xmm1, xmm2",
		"movshdup xmm1, xmm2", "cvtpd2ps xmm1, xmm2", "cvtss2sd xmm1, dword ptr [rax]", "movhps xmm1, qword ptr [rax]", "movlps qword ptr [rax], xmm1",
		"paddb mm0, mm1", "movq mm0, qword ptr [rax]", "movd mm1, eax", "pshufw mm0, mm1, %i8", "psrlw mm0, %i8", "pmaddwd mm0, qword ptr [rip + sym]",
		"movq2dq xmm1, mm0", "movdq2q mm0, xmm1", "cvtpi2ps xmm1, mm0", "maskmovq mm0, mm1", "movntq qword ptr [rax], mm0",
		"pinsrw mm0, eax, %i8", "pextrw eax, mm0, %i8",
		"movntss dword ptr [rax], xmm1", "movntsd qword ptr [rax], xmm1",
	}
	grp0F.add(&ts, sse0f...)
	// SSE4a (AMD): 66/F2 0F 78/79; on Intel these bytes are #UD.
	group{cat: "0f", enc: "legacy", mp: "0f", branch: "none", vendor: "amd"}.add(&ts,
		"extrq xmm1, %i8, %j8", "insertq xmm1, xmm2, %i8, %j8", "extrq xmm1, xmm2", "insertq xmm1, xmm2")
	grp0F38.add(&ts,
		"pshufb xmm1, xmm2", "phaddw xmm1, xmm2", "phaddd xmm1, xmm2", "pmaddubsw xmm1, xmm2", "pmulhrsw xmm1, xmm2", "psignb xmm1, xmm2",
		"pabsb xmm1, xmm2", "pblendvb xmm1, xmm2, xmm0", "ptest xmm1, xmm2", "pmovsxbw xmm1, xmm2", "pmovzxbd xmm1, dword ptr [rax]",
		"pmuldq xmm1, xmm2", "pcmpeqq xmm1, xmm2", "packusdw xmm1, xmm2", "pminsb xmm1, xmm2", "pmaxud xmm1, xmm2", "pmulld xmm1, xmm2",
		"phminposuw xmm1, xmm2", "aesenc xmm1, xmm2", "aesenclast xmm1, xmmword ptr [rip + sym]", "aesdec xmm1, xmm2", "aesimc xmm1, xmm2",
		"sha1nexte xmm1, xmm2", "sha1msg1 xmm1, xmm2", "sha256rnds2 xmm1, xmm2, xmm0", "sha256msg1 xmm1, xmm2",
		"crc32 eax, byte ptr [rax]", "crc32 eax, ecx", "crc32 rax, qword ptr [rip + sym]", "crc32 eax, cx",
		"movbe eax, dword ptr [rax]", "movbe qword ptr [rip + sym], rcx", "movbe cx, word ptr [rax]",
		"adcx eax, ecx", "adox rax, qword ptr [rax]", "invpcid rax, xmmword ptr [rcx]", "invept rax, xmmword ptr [rcx]",
		"pshufb mm0, mm1", "phaddw mm0, qword ptr [rax]", "pabsd mm0, mm1",
		"pcmpgtq xmm1, xmm2", "pmovzxwq xmm1, xmm2", "blendvps xmm1, xmm2, xmm0", "movntdqa xmm1, xmmword ptr [rax]",
		"gf2p8mulb xmm1, xmm2", "aesenc128kl xmm1, [rax]", "aesdec256kl xmm1, [rax]", "aesencwide128kl [rax]", "loadiwkey xmm1, xmm2",
		"encodekey128 eax, ecx",
	)
	grp0F3A.add(&ts,
		"roundps xmm1, xmm2, %i8", "roundpd xmm1, xmm2, %i8", "roundss xmm1, dword ptr [rax], %i8", "roundsd xmm1, qword ptr [rip + sym], %i8",
		"blendps xmm1, xmm2, %i8", "blendpd xmm1, xmm2, %i8", "pblendw xmm1, xmm2, %i8", "palignr xmm1, xmm2, %i8",
		"pextrb eax, xmm1, %i8", "pextrw word ptr [rax], xmm1, %i8", "pextrd dword ptr [rip + sym], xmm1, %i8", "pextrq rax, xmm1, %i8",
		"extractps eax, xmm1, %i8", "pinsrb xmm1, eax, %i8", "insertps xmm1, xmm2, %i8", "pinsrd xmm1, dword ptr [rax], %i8", "pinsrq xmm1, rax, %i8",
		"dpps xmm1, xmm2, %i8", "dppd xmm1, xmm2, %i8", "mpsadbw xmm1, xmm2, %i8", "pclmulqdq xmm1, xmm2, %i8",
		"pcmpestrm xmm1, xmm2, %i8", "pcmpestri xmm1, xmmword ptr [rip + sym], %i8", "pcmpistrm xmm1, xmm2, %i8", "pcmpistri xmm1, xmm2, %i8",
		"aeskeygenassist xmm1, xmm2, %i8", "palignr mm0, mm1, %i8", "sha1rnds4 xmm1, xmm2, %i8(3,1)", "gf2p8affineqb xmm1, xmm2, %i8", "gf2p8affineinvqb xmm1, xmmword ptr [rax], %i8",
	)

	// 3DNow!: 0F 0F ModRM [SIB] [disp] opcode-suffix.
	dn := group{cat: "3dnow", enc: "3dnow", mp: "3dnow", branch: "none", vendor: "amd"}
	for _, op := range []string{"pfadd", "pfsub", "pfsubr", "pfmul", "pfmax", "pfmin", "pfcmpeq", "pfcmpge", "pfcmpgt", "pfacc",
		"pfnacc", "pfpnacc", "pi2fd", "pi2fw", "pf2id", "pf2iw", "pfrcp", "pfrcpit1", "pfrcpit2", "pfrsqrt", "pfrsqit1",
		"pavgusb", "pmulhrw", "pswapd"} {
		dn.add(&ts, op+" mm1, mm2", op+" mm0, qword ptr [rip + sym]")
	}
	for _, m := range []string{"[rax]", "[rcx + %d8]", "[rdx + %d32]", "[rsp]", "[rax + rbx*4 + %d8]", "[rbx*4 + %d32]", "[r9 + r10*2]", "[eax + %d8]", "fs:[%d32]"} {
		dn.add(&ts, "pfmul mm3, qword ptr "+m)
	}
	group{cat: "3dnow", enc: "legacy", mp: "0f", branch: "none", vendor: "amd"}.add(&ts, "prefetch byte ptr [rip + sym]", "prefetchw byte ptr [rax + %d8]")
	return ts
}

// vectorTemplates lists VEX, EVEX and XOP.
func vectorTemplates() (ts []tmpl) {
	// VEX.
	vex2 := group{cat: "vex", enc: "vex2", mp: "0f", branch: "none"}
	vex3 := func(mp string, asms ...string) {
		group{cat: "vex", enc: "vex3", mp: mp, branch: "none"}.add(&ts, asms...)
	}
	vex2.add(&ts,
		"vaddps xmm1, xmm2, xmm3", "vaddps ymm1, ymm2, ymm3", "vaddps xmm8, xmm15, xmm0", "vaddps ymm9, ymm2, ymmword ptr [rip + sym]",
		"vmovaps xmm1, xmmword ptr [rax]", "vmovups ymmword ptr [rax + %d8], ymm1", "vxorps xmm1, xmm2, xmm3", "vpxor ymm1, ymm2, ymm3",
		"vpaddd xmm1, xmm2, xmmword ptr [rcx + rdx*4 + %d32]", "vzeroupper", "vzeroall", "vmovd xmm1, eax", "vmovd eax, xmm1",
		"vpshufd ymm1, ymm2, %i8", "vcmpps xmm1, xmm2, xmm3, %i8(3,5)", "vshufps ymm1, ymm2, ymmword ptr [rax], %i8",
		"vpsrlw xmm1, xmm2, %i8", "vpslldq ymm1, ymm2, %i8", "vmovdqu ymm1, ymmword ptr [rip + sym]", "vpmovmskb eax, ymm1",
		"vcvtsi2sd xmm1, xmm2, eax", "vmovss xmm1, xmm2, xmm3", "vmovsd qword ptr [rax], xmm1", "vsqrtps ymm1, ymm2",
		"vpinsrw xmm1, xmm2, eax, %i8", "vpextrw eax, xmm1, %i8", "vldmxcsr dword ptr [rax]", "vmaskmovdqu xmm1, xmm2",
		"vmovaps xmm1, xmmword ptr fs:[rax]", "vmovaps xmm1, xmmword ptr [eax + %d8]", "vmovntps ymmword ptr [rax], ymm1",
		"vmovaps xmm1, xmmword ptr [rip + sym]", "kmovw k1, k2", "kandw k1, k2, k3", "kmovw eax, k1", "kortestw k1, k2", "kmovb k1, byte ptr [rax]",
	)
	vex3("0f", "{vex3} vaddps xmm1, xmm2, xmm3", "{vex3} vaddps ymm1, ymm2, ymm3", "vaddps xmm1, xmm2, xmmword ptr [r8]",
		"vaddps ymm1, ymm2, ymmword ptr [rax + r9*2 + %d8]", "vmovq xmm1, rax", "vmovq rax, xmm1", "vcvtsi2sd xmm1, xmm2, rax",
		"kmovq k1, k2", "kandq k1, k2, k3", "kmovd k1, k2", "{vex3} vpshufd ymm1, ymm2, %i8",
		"{vex3} vmovaps xmm1, xmmword ptr [rip + sym]")
	vex3("0f38", "vbroadcastss ymm1, dword ptr [rax]", "vpshufb ymm1, ymm2, ymm3", "vfmadd132ps xmm1, xmm2, xmm3", "vfmadd132pd ymm1, ymm2, ymm3",
		"vfmadd231sd xmm1, xmm2, qword ptr [rip + sym]", "vpsllvq ymm1, ymm2, ymm3", "vpsllvd xmm1, xmm2, xmm3", "vpbroadcastb ymm1, xmm2",
		"vpgatherdd xmm1, [rax + xmm2*4 + %d8], xmm3", "vpgatherqq ymm1, [rax + ymm2*8 + %d32], ymm3", "vgatherdps ymm1, [rbp + ymm2*2], ymm3",
		"vpmaskmovd xmm1, xmm2, xmmword ptr [rax]", "vpermd ymm1, ymm2, ymm3", "vcvtph2ps ymm1, xmm2", "vtestps ymm1, ymm2",
		"andn eax, ecx, edx", "andn rax, rcx, qword ptr [rip + sym]", "bextr eax, ecx, edx", "blsr rax, rcx", "blsi eax, dword ptr [rax]",
		"blsmsk eax, ecx", "bzhi rax, rcx, rdx", "pdep eax, ecx, edx", "pext rax, rcx, qword ptr [rax]", "mulx rax, rcx, rdx",
		"sarx eax, ecx, edx", "shlx rax, qword ptr [rax], rcx", "shrx eax, ecx, edx",
		"{vex} vpdpbusd xmm1, xmm2, xmm3", "{vex} vpdpwssd ymm1, ymm2, ymmword ptr [rax]", "vaesenc ymm1, ymm2, ymm3", "vgf2p8mulb ymm1, ymm2, ymm3",
		"tileloadd tmm1, [rax + rbx*4 + %d8]", "tileloaddt1 tmm2, [rsp + rcx]", "tilestored [rax + rbx*2 + %d32], tmm3", "tilezero tmm4",
		"tilerelease", "ldtilecfg [rax]", "sttilecfg [rip + sym]", "tdpbssd tmm1, tmm2, tmm3", "tdpbf16ps tmm1, tmm2, tmm3", "tdpbuud tmm5, tmm6, tmm7",
	)
	vex3("0f3a", "vpermq ymm1, ymm2, %i8", "vpermpd ymm1, ymmword ptr [rax], %i8", "vpermilps xmm1, xmm2, %i8", "vperm2f128 ymm1, ymm2, ymm3, %i8",
		"vinsertf128 ymm1, ymm2, xmm3, %i8", "vextractf128 xmm1, ymm2, %i8", "vinserti128 ymm1, ymm2, xmmword ptr [rip + sym], %i8",
		"vblendvps xmm1, xmm2, xmm3, xmm4", "vblendvpd ymm1, ymm2, ymmword ptr [rax], ymm4", "vpblendvb xmm1, xmm2, xmm3, xmm4",
		"vcvtps2ph xmm1, ymm2, %i8", "vpalignr ymm1, ymm2, ymm3, %i8", "vroundps ymm1, ymm2, %i8", "vpclmulqdq ymm1, ymm2, ymm3, %i8",
		"vgf2p8affineqb ymm1, ymm2, ymm3, %i8", "vpextrq rax, xmm1, %i8", "vpinsrq xmm1, xmm2, rax, %i8", "vpblendd ymm1, ymm2, ymm3, %i8",
		"rorx eax, ecx, %i8", "rorx rax, qword ptr [rip + sym], %i8", "kshiftlw k1, k2, %i8", "kshiftrq k1, k2, %i8",
		"vmpsadbw ymm1, ymm2, ymm3, %i8", "vdpps ymm1, ymm2, ymm3, %i8", "vpcmpestri xmm1, xmm2, %i8",
	)

	// EVEX: maps 1, 2, 3, 5 and 6, masking, zeroing, broadcast, rounding,
	// high registers, and compressed disp8*N.
	ev := func(mp string, asms ...string) {
		group{cat: "evex", enc: "evex", mp: mp, branch: "none"}.add(&ts, asms...)
	}
	ev("0f", "vaddps zmm1, zmm2, zmm3", "vaddps zmm1 {k1}, zmm2, zmm3", "vaddps zmm1 {k1} {z}, zmm2, zmm3", "vaddps zmm1, zmm2, zmm3, {rn-sae}",
		"vaddps zmm17, zmm30, zmm5", "vaddps zmm1, zmm2, dword ptr [rax + %d8x4]{1to16}", "vaddps ymm1, ymm2, dword ptr [rip + sym]{1to8}",
		"vaddpd zmm1, zmm2, qword ptr [rax + %d8x8]{1to8}", "{evex} vaddps xmm1, xmm2, xmm3", "{evex} vaddps ymm1, ymm2, ymm3",
		"vaddps xmm16, xmm2, xmm3", "vaddps ymm1, ymm2, ymm19", "vmovdqu64 zmm1, zmmword ptr [rip + sym]", "vmovdqu8 zmm1 {k2}, zmm2",
		"vpaddq zmm1, zmm2, zmm3", "vpaddq zmm1 {k7}, zmm2, qword ptr [rax + %d8x8]{1to8}",
		"vmovaps zmmword ptr [rax + %d8x64], zmm1", "vsqrtpd zmm1, zmm2, {rz-sae}", "vcvtps2pd zmm1, ymm2, {sae}",
		"vpandd zmm1, zmm2, zmm3", "vpandq zmm1 {k1} {z}, zmm2, zmm3", "vunpcklps zmm1, zmm2, zmm3", "vpshufd zmm1, zmm2, %i8",
		"vpsrld zmm1, zmm2, %i8", "vcmpps k1, zmm2, zmm3, %i8(3,5)", "vpcmpeqd k1, zmm2, zmm3", "vmovd xmm17, eax", "vmovq xmm17, rax",
		"{evex} vaddss xmm1, xmm2, dword ptr [rax + %d8x4]", "vaddsd xmm1 {k1}, xmm2, qword ptr [rcx + %d8x8]",
	)
	ev("0f38", "vpermt2d zmm1, zmm2, zmm3", "vpshufb zmm1, zmm2, zmm3", "vpcompressd zmmword ptr [rax + %d8x4], zmm1", "vpexpandd zmm1, zmm2", "vpmovqd ymm1, zmm2",
		"vpgatherdd zmm1 {k1}, [rax + zmm2*4 + %d8x4]", "vpscatterdd [rax + zmm2*4 + %d8x4] {k1}, zmm1", "vpdpbusd zmm1, zmm2, zmm3",
		"vpopcntb zmm1, zmm2", "vp2intersectd k2, zmm1, zmm3", "vcvtne2ps2bf16 zmm1, zmm2, zmm3", "vdpbf16ps zmm1, zmm2, zmm3",
		"vpbroadcastd zmm1, eax", "vpbroadcastq zmm1, qword ptr [rax + %d8x8]", "vfmadd132ps zmm1, zmm2, zmm3", "vfmadd231pd zmm1 {k1}, zmm2, zmm3, {ru-sae}",
		"vpermb zmm1, zmm2, zmm3", "vpmadd52luq zmm1, zmm2, zmm3", "vpshldvd zmm1, zmm2, zmm3", "vaesenc zmm1, zmm2, zmm3", "vgf2p8mulb zmm1, zmm2, zmm3",
		"vbroadcasti32x4 zmm1, xmmword ptr [rax + %d8x16]", "vpconflictd zmm1, zmm2", "vplzcntq zmm1, zmm2", "vrcp14ps zmm1, zmm2",
		"vpsllvq zmm1, zmm2, zmmword ptr [rip + sym]", "vpmovm2d zmm1, k1", "vptestmd k1, zmm2, zmm3",
	)
	ev("0f3a", "vpternlogd zmm1, zmm2, zmm3, %i8", "vpternlogq zmm1, zmm2, qword ptr [rax + %d8x8]{1to8}, %i8", "vcvtps2ph ymm1, zmm2, %i8",
		"vfixupimmps zmm1, zmm2, zmm3, %i8", "vgetmantps zmm1, zmm2, %i8(3,5)", "vrndscaleps zmm1, zmm2, %i8", "vextracti64x4 ymm1, zmm2, %i8(1,0)",
		"vinserti32x8 zmm1, zmm2, ymm3, %i8(1,0)", "vpcmpd k1, zmm2, zmm3, %i8(3,5)", "vpcmpub k1 {k2}, zmm2, zmmword ptr [rip + sym], %i8(3,5)",
		"vshufi64x2 zmm1, zmm2, zmm3, %i8", "valignd zmm1, zmm2, zmm3, %i8", "vdbpsadbw zmm1, zmm2, zmm3, %i8", "vpshldd zmm1, zmm2, zmm3, %i8",
		"vgf2p8affineqb zmm1, zmm2, zmm3, %i8", "vrangeps zmm1, zmm2, zmm3, %i8(3,5)", "vreduceps zmm1, zmm2, %i8", "vfpclassps k1, zmm2, %i8",
		"vpclmulqdq zmm1, zmm2, zmm3, %i8", "vextractf32x4 xmmword ptr [rax + %d8x16], zmm1, %i8(1,2)",
	)
	ev("map5", "vaddph zmm1, zmm2, zmm3", "vaddph zmm1 {k1}, zmm2, word ptr [rax + %d8x2]{1to32}", "vaddph zmm1 {k1} {z}, zmm2, zmmword ptr [rax + %d8x64]",
		"vaddph zmm1, zmm2, zmm3, {rn-sae}", "vaddph ymm1, ymm2, ymmword ptr [rip + sym]", "vaddph xmm21, xmm22, xmm23", "vsubph zmm1, zmm2, zmm3",
		"vmulph zmm1, zmm2, zmm3", "vdivph zmm1, zmm2, zmm3", "vminph zmm1, zmm2, zmm3", "vmaxph zmm1, zmm2, zmm3", "vsqrtph zmm1, zmm2",
		"vaddsh xmm1, xmm2, word ptr [rax + %d8x2]", "vmovsh xmm1, word ptr [rax]", "vmovsh xmm1, xmm2, xmm3", "vmovw xmm1, eax", "vmovw eax, xmm1",
		"vcvtdq2ph ymm1, zmm2", "vcvtph2dq zmm1, ymm2", "vcvtph2pd zmm1, xmm2", "vcvtph2w zmm1, zmm2",
		"vcomish xmm1, xmm2", "vucomish xmm1, word ptr [rip + sym]", "vcvttph2qq zmm1, xmm2",
	)
	ev("map6", "vfmadd132ph zmm1, zmm2, zmm3", "vfmadd213ph zmm1 {k1}, zmm2, word ptr [rax + %d8x2]{1to32}", "vfmaddsub132ph zmm1, zmm2, zmm3",
		"vscalefph zmm1, zmm2, zmm3", "vrcpph zmm1, zmm2", "vrsqrtph zmm1, zmmword ptr [rip + sym]", "vfcmaddcph zmm1, zmm2, zmm3",
		"vfmulcph zmm1, zmm2, zmm3", "vgetexpph zmm1, zmm2", "vcvtph2psx zmm1, ymm2", "vfmadd231sh xmm1, xmm2, word ptr [rax + %d8x2]",
		"vfnmsub132ph zmm1, zmm2, zmm3, {rd-sae}", "vrcpsh xmm1, xmm2, xmm3", "vcvtsh2ss xmm1, xmm2, xmm3",
	)
	ev("0f3a", "vcmpph k1, zmm2, zmm3, %i8(3,5)", "vfpclassph k1, zmm2, %i8", "vreduceph zmm1, zmm2, %i8", "vrndscaleph zmm1, zmm2, %i8",
		"vgetmantph zmm1, word ptr [rax + %d8x2]{1to32}, %i8(3,5)")
	for _, m := range append(append([]string{}, memForms64...), memForms32...) {
		ev("0f", "vaddps zmm1, zmm2, zmmword ptr "+scaled(m, 64))
		ev("map5", "vaddph ymm1, ymm2, ymmword ptr "+scaled(m, 32))
		ev("0f38", "vpbroadcastd xmm17, dword ptr "+scaled(m, 4))
	}
	for _, m := range memForms64 {
		vex3("0f38", "vfmadd213ps ymm1, ymm2, ymmword ptr "+m)
		if regexp.MustCompile(`\br(8|9|1[0-5])`).MatchString(m) {
			vex3("0f", "vmovdqa xmm1, xmmword ptr "+m)
		} else {
			vex2.add(&ts, "vmovdqa xmm1, xmmword ptr "+m)
		}
	}

	// XOP (AMD).
	xop := func(mp string, asms ...string) {
		group{cat: "xop", enc: "xop", mp: mp, branch: "none", vendor: "amd"}.add(&ts, asms...)
	}
	xop("xop8", "vpcmov xmm1, xmm2, xmm3, xmm4", "vpcmov ymm1, ymm2, ymm3, ymmword ptr [rip + sym]", "vpcmov xmm1, xmm2, xmmword ptr [rax], xmm4",
		"vpperm xmm1, xmm2, xmm3, xmm4", "vprotb xmm1, xmm2, %i8", "vprotq xmm1, xmmword ptr [rax + %d8], %i8", "vpcomb xmm1, xmm2, xmm3, %i8(3,5)",
		"vpcomuq xmm1, xmm2, xmmword ptr [rip + sym], %i8(3,5)", "vpmacsdd xmm1, xmm2, xmm3, xmm4", "vpmadcsswd xmm1, xmm2, xmmword ptr [rax], xmm4")
	xop("xop9", "vprotb xmm1, xmm2, xmm3", "vprotd xmm1, xmmword ptr [rax], xmm3", "vpshlb xmm1, xmm2, xmm3", "vpshaq xmm1, xmm2, xmmword ptr [rcx + %d32]",
		"vfrczps xmm1, xmm2", "vfrczpd ymm1, ymmword ptr [rip + sym]", "vphaddbw xmm1, xmm2", "vphsubdq xmm1, xmmword ptr [rax]",
		"blcfill eax, ecx", "blsfill rax, qword ptr [rax]", "tzmsk eax, ecx", "blci rax, rcx", "t1mskc eax, dword ptr [rip + sym]",
		"llwpcb rax", "slwpcb eax")
	xop("xopa", "bextr eax, ecx, %i32", "bextr rax, qword ptr [rip + sym], %i32", "lwpins eax, ecx, %i32", "lwpval rax, dword ptr [rax + %d8], %i32")
	return ts
}

// newerTemplates lists CET and the newer extensions LLVM 14 knows.
func newerTemplates() (ts []tmpl) {
	// CET and newer extensions LLVM 14 knows.
	cet := group{cat: "newer", enc: "legacy", mp: "0f", branch: "none"}
	cet.add(&ts, "endbr64", "endbr32", "rdsspd eax", "rdsspq rax", "incsspd eax", "incsspq rax", "saveprevssp", "rstorssp [rax]",
		"setssbsy", "clrssbsy [rip + sym]", "serialize", "xsusldtrk", "xresldtrk", "tpause eax", "umonitor rax", "umwait eax",
		"clui", "stui", "testui", "senduipi rax", "cldemote byte ptr [rax]", "pconfig", "wbnoinvd", "rdpid rax", "ptwrite qword ptr [rax]",
		"clwb byte ptr [rip + sym]", "clflushopt byte ptr [rax]", "rdpkru", "wrpkru")
	group{cat: "newer", enc: "legacy", mp: "0f"}.add(&ts, "uiret")
	group{cat: "newer", enc: "legacy", mp: "0f38", branch: "none"}.add(&ts, "wrssd dword ptr [rax], ecx", "wrssq qword ptr [rip + sym], rax",
		"wrussd dword ptr [rax], ecx", "wrussq qword ptr [rax], rbx", "movdir64b rax, zmmword ptr [rbx]", "movdir64b eax, zmmword ptr [ebx]",
		"movdiri dword ptr [rax], ecx", "movdiri qword ptr [rip + sym], rcx", "enqcmd rax, zmmword ptr [rbx]", "enqcmds rax, zmmword ptr [rip + sym]")
	group{cat: "newer", enc: "legacy", mp: "0f3a", branch: "none"}.add(&ts, "hreset %i8")
	return ts
}

// prefixTemplates builds the prefix vectors from llvm-mc encoded bases.
func prefixTemplates() []tmpl {
	var ts []tmpl
	all := []byte{0x26, 0x2e, 0x36, 0x3e, 0x64, 0x65, 0x66, 0x67, 0xf0, 0xf2, 0xf3}
	type base struct {
		asm, mp, branch string
		n               int    // encoded length
		skip            []byte // prefixes that change the meaning or raise #UD
	}
	bases := []base{
		{"add dword ptr [rax + rbx*4 + %d8], ecx", "1byte", "none", 4, nil},
		{"add qword ptr [rip + sym], %i8", "1byte", "none", 8, nil},
		{"nop", "1byte", "none", 1, []byte{0xf0}},
		{"movups xmm1, xmmword ptr [rax + %d8]", "0f", "none", 4, []byte{0xf0}},
		{"pshufb xmm1, xmmword ptr [rip + sym]", "0f38", "none", 9, []byte{0xf0, 0xf2, 0xf3}},
		{"cmp ecx, %i8", "1byte", "none", 3, []byte{0xf0}},
	}
	rule := "legacy prefixes each add one byte (Intel SDM Vol. 2A §2.1.1, AMD APM Vol. 3 §1.2)"
	add := func(b base, pre []byte, extra string) {
		why := rule
		if extra != "" {
			why += "; " + extra
		}
		n := len(pre) + b.n
		objOK := ""
		switch {
		case n > 15:
			why += fmt.Sprintf("; %d bytes exceed the 15-byte limit (Intel SDM Vol. 2A §2.1, AMD APM Vol. 3 §1.1: #GP)", n)
		case countPrefixes(pre) >= 14:
			objOK = "binutils stops after 14 prefix bytes and prints them as a line of their own, but the limit is 15 bytes for the whole instruction, and an Intel CPU executes these 15 bytes as one instruction (checked against a guard page)"
		}
		ts = append(ts, tmpl{cat: "prefix", asm: b.asm, enc: "legacy", mp: b.mp, branch: b.branch, pre: pre, why: why, objOK: objOK})
	}
	skips := func(b base, p byte) bool { return bytes.IndexByte(b.skip, p) >= 0 }
	for _, b := range bases {
		for _, p := range all {
			if skips(b, p) {
				continue
			}
			add(b, []byte{p}, "")
		}
	}
	// Each prefix repeated, two to four times.
	b0 := bases[0]
	for _, p := range all {
		for k := 2; k <= 4; k++ {
			add(b0, bytes.Repeat([]byte{p}, k), "a repeated prefix is still one byte each")
		}
	}
	// Odd orders: segment after operand size, lock last, 67 first...
	orders := [][]byte{
		{0xf3, 0x66}, {0x66, 0xf3}, {0xf0, 0x66, 0x2e}, {0x67, 0xf2, 0x64, 0x66}, {0x65, 0xf0, 0xf3, 0x36, 0x67},
		{0x2e, 0x3e, 0x26, 0x36, 0x64, 0x65}, {0xf2, 0xf3, 0xf2, 0xf3}, {0x66, 0x67, 0x66, 0x67},
		{0xf3, 0xf2, 0xf0, 0x67, 0x66, 0x65, 0x64, 0x3e},
	}
	for _, o := range orders {
		add(bases[0], o, "")
		add(bases[1], o, "")
	}
	// Exactly 15 bytes, and one past it.
	add(bases[0], all, "all eleven prefixes once: 11 + 4 = 15 bytes")
	rev := append([]byte(nil), all...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	add(bases[0], rev, "all eleven prefixes in reverse order: 15 bytes")
	add(bases[0], append([]byte{0x2e}, all...), "twelve prefixes: 16 bytes")
	add(bases[1], []byte{0x66, 0x2e, 0x3e, 0x64, 0x65, 0x36, 0x26}, "7 + 8 = 15 bytes")
	add(bases[1], []byte{0x66, 0x2e, 0x3e, 0x64, 0x65, 0x36, 0x26, 0x67}, "8 + 8 = 16 bytes")
	add(bases[2], bytes.Repeat([]byte{0x66}, 14), "fourteen 66 prefixes and a one-byte opcode: 15 bytes")
	add(bases[2], bytes.Repeat([]byte{0x2e}, 13), "thirteen prefixes and a one-byte opcode: 14 bytes")
	add(bases[2], bytes.Repeat([]byte{0x2e}, 14), "fourteen prefixes and a one-byte opcode: 15 bytes")
	add(bases[2], bytes.Repeat([]byte{0x2e}, 15), "fifteen prefixes and a one-byte opcode: 16 bytes")
	add(bases[5], bytes.Repeat([]byte{0x3e}, 12), "twelve prefixes and a 3-byte instruction: 15 bytes")
	add(bases[5], bytes.Repeat([]byte{0x3e}, 13), "thirteen prefixes and a 3-byte instruction: 16 bytes")
	add(bases[3], bytes.Repeat([]byte{0x26}, 11), "eleven prefixes and a 4-byte instruction: 15 bytes")
	add(bases[3], bytes.Repeat([]byte{0x26}, 12), "twelve prefixes and a 4-byte instruction: 16 bytes")
	return ts
}

// countPrefixes returns the number of legacy prefix bytes in p.
func countPrefixes(p []byte) int {
	n := 0
	for _, c := range p {
		if isLegacyPrefix(c) {
			n++
		}
	}
	return n
}

// ---------------------------------------------------------------------------
// Hand vectors.

// hv builds a hand vector from hex (spaces allowed).
func hv(cat, vendor, hexs string, length int, fields, text, why string) *vector {
	b, err := hex.DecodeString(strings.ReplaceAll(hexs, " ", ""))
	if err != nil {
		panic(fmt.Sprintf("hand vector %q: %v", hexs, err))
	}
	v := &vector{cat: cat, vendor: vendor, text: text, note: why}
	if fields != "" {
		v.fields = strings.Fields(fields)
	}
	switch {
	case length > 0:
		v.length = length
		v.input = append(b, filler...)
	case length == 0:
		v.err = "invalid"
		v.input = b
	case length == -1:
		v.err = "truncated"
		v.input = b
		v.noObj = true
	case length == -2:
		v.err = "toolong"
		v.input = b
	}
	return v
}

// handVectors lists the vectors no assembler emits, each with the rule that
// fixes its expectation.
func handVectors() []*vector {
	var vs []*vector
	for _, part := range []func() []*vector{invalidVectors, placementVectors, vendorVectors, apxVectors, limitVectors} {
		vs = append(vs, part()...)
	}
	return vs
}

// invalidVectors lists the opcodes invalid in 64-bit mode, and C4, C5 and
// 62 as the VEX and EVEX escapes whatever the byte after them.
func invalidVectors() (vs []*vector) {
	add := func(v *vector) *vector { vs = append(vs, v); return v }
	// Opcodes invalid in 64-bit mode: the "i64" entries of the one-byte
	// opcode map (Intel SDM Vol. 2D Table A-2; AMD APM Vol. 3 Table A-1 and
	// §1.9 "Invalid and reassigned instructions in 64-bit mode").
	inv := "invalid in 64-bit mode (Intel SDM Vol. 2D Table A-2, superscript i64; AMD APM Vol. 3 Table A-1)"
	for _, c := range []struct{ hex, name string }{
		{"06", "push es"}, {"07", "pop es"}, {"0e", "push cs"}, {"16", "push ss"}, {"17", "pop ss"},
		{"1e", "push ds"}, {"1f", "pop ds"}, {"27", "daa"}, {"2f", "das"}, {"37", "aaa"}, {"3f", "aas"},
		{"60", "pusha"}, {"61", "popa"}, {"82 c0 11", "add al, imm8 (82 alias of 80)"}, {"9a 11 22 33 44 55 66", "call far ptr16:32"},
		{"ce", "into"}, {"d4 0a", "aam"}, {"d6", "salc"}, {"ea 11 22 33 44 55 66", "jmp far ptr16:32"},
	} {
		add(hv("invalid", "any", c.hex+" 00 00 00 00 00 00 00 00", 0, "", c.name, inv))
	}
	add(hv("invalid", "any", "66 06 00 00 00 00", 0, "", "66 push es", inv+"; a prefix does not make it valid"))
	add(hv("invalid", "any", "48 27 00 00 00 00", 0, "", "REX.W daa", inv+"; REX does not make it valid"))
	add(hv("invalid", "any", "2e 9a 11 22 33 44 55 66 00 00", 0, "", "cs call far", inv))
	// C4, C5 and 62 are always VEX/EVEX in 64-bit mode, whatever the next
	// byte's mod bits (Intel SDM Vol. 2A §2.3.5: LES/LDS are invalid in
	// 64-bit mode, the bytes are the VEX escapes; §2.7.1 for EVEX and BOUND).
	vexNote := "in 64-bit mode C5/C4/62 are VEX/EVEX regardless of the next byte's mod field (Intel SDM Vol. 2A §2.3.5, §2.7.1)"
	add(hv("vex", "any", "c5 00 58 c0", 4, "rip=- rel=- enc=vex2 map=0f", "vaddps xmm8, xmm15, xmm0 (LDS in 32-bit mode)", vexNote))
	add(hv("vex", "any", "c4 02 79 00 c0", 5, "rip=- rel=- enc=vex3 map=0f38", "vpshufb xmm8, xmm0, xmm8 (LES in 32-bit mode)", vexNote))
	add(hv("evex", "any", "62 61 7c 48 58 c3", 6, "rip=- rel=- enc=evex map=0f", "vaddps zmm24, zmm0, zmm3 (BOUND in 32-bit mode)", vexNote))
	return vs
}

// placementVectors lists REX placement and the 4-byte moffs under 67.
func placementVectors() (vs []*vector) {
	add := func(v *vector) *vector { vs = append(vs, v); return v }
	// REX placement: a REX prefix counts only immediately before the
	// opcode (or escape); earlier ones are ignored but are still bytes of
	// the instruction (Intel SDM Vol. 2A §2.2.1 "Other placements are
	// ignored"; AMD APM Vol. 3 §1.2.7).
	rexWhy := "a REX not immediately before the opcode is ignored but belongs to the instruction (Intel SDM Vol. 2A §2.2.1, AMD APM Vol. 3 §1.2.7)"
	rexObj := "binutils prints an ignored REX as a line of its own; an Intel CPU executes the whole byte string as one instruction (checked against a guard page)"
	v := add(hv("rex", "any", "48 66 8b c1", 4, "rip=- rel=- enc=legacy map=1byte", "REX.W 66 mov ax, cx (REX ignored)", rexWhy))
	v.objOK = rexObj
	v = add(hv("rex", "any", "41 48 01 c8", 4, "rip=- rel=- enc=legacy map=1byte", "REX.B REX.W add rax, rcx (first REX ignored)", rexWhy))
	v.objOK = rexObj
	v = add(hv("rex", "any", "4f 2e 0f c1 d3", 5, "rip=- rel=- enc=legacy map=0f", "REX 2E xadd ebx, edx (REX ignored)", rexWhy))
	v.objOK = rexObj
	v = add(hv("rex", "any", "48 f0 01 08", 4, "rip=- rel=- enc=legacy map=1byte", "REX.W lock add [rax], ecx (REX ignored)", rexWhy))
	v.objOK = rexObj
	add(hv("rex", "any", "40 90", 2, "rip=- rel=- enc=legacy map=1byte", "REX 90: nop with an empty REX", "REX 40 is a prefix with no bits set (Intel SDM Vol. 2A §2.2.1)"))
	add(hv("rex", "any", "48 b8 11 22 33 44 55 66 77 88", 10, "imm=2:8 rip=- rel=- enc=legacy map=1byte", "movabs rax, imm64",
		"B8+r with REX.W takes an 8-byte immediate (Intel SDM Vol. 2B MOV: REX.W + B8+ rd io)"))
	add(hv("rex", "any", "66 48 b8 11 22 33 44 55 66 77 88", 11, "imm=3:8 rip=- rel=- enc=legacy map=1byte", "66 REX.W movabs rax, imm64",
		"REX.W takes precedence over 66 (Intel SDM Vol. 2A §2.2.1.2)"))
	add(hv("rex", "any", "66 48 81 c0 11 22 33 44", 8, "imm=4:4 rip=- rel=- enc=legacy map=1byte", "66 REX.W add rax, imm32",
		"REX.W takes precedence over 66, so Iz stays 4 bytes (Intel SDM Vol. 2A §2.2.1.2)"))
	add(hv("rex", "any", "66 48 e8 11 22 33 44", 7, "rel=3:4 branch=call enc=legacy map=1byte", "66 REX.W call rel32",
		"REX.W takes precedence over 66 (AMD APM Vol. 3 §1.2.2 and §1.4.4; on Intel 66 is ignored on near branches)"))

	// 67 before A0-A3: the moffs is 4 bytes (Intel SDM Vol. 2A §2.2.1.4:
	// "the address size of moffs is given by the address-size attribute").
	moffsWhy := "a 67 prefix makes the A0-A3 moffs 4 bytes (Intel SDM Vol. 2A §2.2.1.4 and MOV moffs notes; AMD APM Vol. 3 §2.5.10)"
	add(hv("moffs", "any", "67 a0 11 22 33 44", 6, "disp=2:4 rip=- rel=- enc=legacy map=1byte", "addr32 mov al, byte ptr [0x44332211]", moffsWhy))
	add(hv("moffs", "any", "67 a1 11 22 33 44", 6, "disp=2:4 rip=- rel=- enc=legacy map=1byte", "addr32 mov eax, dword ptr [0x44332211]", moffsWhy))
	add(hv("moffs", "any", "67 48 a3 11 22 33 44", 7, "disp=3:4 rip=- rel=- enc=legacy map=1byte", "addr32 mov qword ptr [0x44332211], rax", moffsWhy))
	add(hv("moffs", "any", "66 67 a2 11 22 33 44", 7, "disp=3:4 rip=- rel=- enc=legacy map=1byte", "data16 addr32 mov byte ptr [0x44332211], al", moffsWhy))
	add(hv("moffs", "any", "67 a1 11 22 33", -1, "", "addr32 mov eax, moffs32 cut after 3 address bytes", moffsWhy))
	return vs
}

// vendorVectors lists the near branches with 66, the TEST alias F6/F7 /1 and 8F as POP or XOP.
func vendorVectors() (vs []*vector) {
	add := func(v *vector) *vector { vs = append(vs, v); return v }
	// Near branches with 66: AMD64 uses a 16-bit displacement, Intel 64
	// ignores the prefix and keeps 32 bits (AMD APM Vol. 3 §1.2.2 and the
	// JMP/Jcc/CALL pages; Intel SDM Vol. 2A JMP/Jcc/CALL: "in 64-bit mode
	// the operand size is fixed at 64 bits"). objdump -M amd64/intel64.
	vend := "66 on a near relative branch: rel16 on AMD64, ignored on Intel 64 (AMD APM Vol. 3 §1.2.2; Intel SDM Vol. 2A JMP, Jcc, CALL)"
	add(hv("vendor", "amd", "66 e9 11 22", 4, "rel=2:2 branch=jmp enc=legacy map=1byte", "data16 jmp rel16", vend))
	add(hv("vendor", "intel", "66 e9 11 22 33 44", 6, "rel=2:4 branch=jmp enc=legacy map=1byte", "data16 jmp rel32 (66 ignored)", vend))
	add(hv("vendor", "amd", "66 e8 11 22", 4, "rel=2:2 branch=call enc=legacy map=1byte", "data16 call rel16", vend))
	add(hv("vendor", "intel", "66 e8 11 22 33 44", 6, "rel=2:4 branch=call enc=legacy map=1byte", "data16 call rel32 (66 ignored)", vend))
	add(hv("vendor", "amd", "66 0f 84 11 22", 5, "rel=3:2 branch=jcc enc=legacy map=0f", "data16 je rel16", vend))
	add(hv("vendor", "intel", "66 0f 84 11 22 33 44", 7, "rel=3:4 branch=jcc enc=legacy map=0f", "data16 je rel32 (66 ignored)", vend))
	add(hv("vendor", "amd", "66 0f 8f 11 22", 5, "rel=3:2 branch=jcc enc=legacy map=0f", "data16 jg rel16", vend))
	add(hv("vendor", "intel", "66 0f 8f 11 22 33 44", 7, "rel=3:4 branch=jcc enc=legacy map=0f", "data16 jg rel32 (66 ignored)", vend))
	add(hv("vendor", "amd", "f2 66 e9 11 22", 5, "rel=3:2 branch=jmp enc=legacy map=1byte", "bnd data16 jmp rel16", vend))
	add(hv("vendor", "intel", "66 f2 e8 11 22 33 44", 7, "rel=3:4 branch=call enc=legacy map=1byte", "data16 bnd call rel32 (66 ignored)", vend))
	add(hv("vendor", "any", "66 eb 11", 3, "rel=2:1 branch=jmp enc=legacy map=1byte", "data16 jmp rel8", "rel8 is one byte for every operand size"))
	add(hv("vendor", "any", "66 74 11", 3, "rel=2:1 branch=jcc enc=legacy map=1byte", "data16 je rel8", "rel8 is one byte for every operand size"))
	add(hv("vendor", "any", "66 48 e9 11 22 33 44", 7, "rel=3:4 branch=jmp enc=legacy map=1byte", "data16 REX.W jmp rel32",
		"REX.W overrides 66 on AMD64 and 66 is ignored on Intel 64: rel32 on both"))

	// F6/F7 /1: an undocumented alias of TEST with an immediate, like /0
	// (AMD APM Vol. 3 Table A-6 lists /1 as TEST; the length rule of the
	// group is the same, the immediate only belongs to /0 and /1).
	t1 := "F6/F7 /1 decodes as TEST with an immediate (AMD APM Vol. 3 Table A-6 ModRM extensions, group 3; an Intel CPU takes the same length)"
	add(hv("onebyte", "any", "f6 c8 11", 3, "imm=2:1 rip=- rel=- enc=legacy map=1byte", "test al, imm8 (F6 /1)", t1))
	add(hv("onebyte", "any", "f7 08 11 22 33 44", 6, "imm=2:4 rip=- rel=- enc=legacy map=1byte", "test dword ptr [rax], imm32 (F7 /1)", t1))
	add(hv("onebyte", "any", "66 f7 08 11 22", 5, "imm=3:2 rip=- rel=- enc=legacy map=1byte", "test word ptr [rax], imm16 (66 F7 /1)", t1))

	add(hv("onebyte", "any", "f1", 1, "rip=- rel=- branch=int enc=legacy map=1byte", "int1",
		"F1 is INT1/ICEBP, one byte (Intel SDM Vol. 2D Table A-2; AMD APM Vol. 3 Table A-1); llvm-mc 14 has no mnemonic for it"))

	// 8F with ModRM.reg = 0 is POP r/m; XOP only when the mmmmm field
	// (the would-be reg field) is 8 or more (AMD APM Vol. 3 §1.8, XOP).
	xopWhy := "8F is XOP only when bits 4:0 of the next byte are 8 or more, else POP r/m64 (AMD APM Vol. 3 §1.8)"
	add(hv("xop", "any", "8f c0", 2, "rip=- rel=- enc=legacy map=1byte", "pop rax (8F /0 register form)", xopWhy))
	add(hv("xop", "any", "8f 05 11 22 33 44", 6, "rip=2 disp=2:4 rel=- enc=legacy map=1byte", "pop qword ptr [rip + disp32]", xopWhy))
	add(hv("xop", "any", "8f 44 24 11", 4, "disp=3:1 rip=- rel=- enc=legacy map=1byte", "pop qword ptr [rsp + 0x11]", xopWhy))
	return vs
}

// apxVectors lists APX REX2, which no assembler or objdump here knows.
func apxVectors() (vs []*vector) {
	add := func(v *vector) *vector { vs = append(vs, v); return v }
	// APX REX2 (Intel APX Architecture Specification, rev. 6, §3.1.2.1):
	// D5 and one payload byte M0 R4 X4 B4 W R3 X3 B3; M0 selects legacy map
	// 0 or map 1 (0F); the opcode, ModRM, SIB, displacement and immediate
	// follow as for a legacy instruction of that map. JMPABS is REX2 with
	// M0=0 W=0 and opcode A1, followed by a 64-bit absolute address (§3.1.4).
	// Neither LLVM 14 nor binutils 2.40 knows APX, so these are not
	// cross-checked.
	apx := "REX2: D5 + payload byte, then a legacy map 0/1 instruction (Intel APX spec §3.1.2.1); no LLVM 14/binutils 2.40 oracle"
	for _, c := range []struct {
		hex    string
		n      int
		fields string
		text   string
	}{
		{"d5 08 01 c0", 4, "rip=- rel=- enc=rex2 map=1byte", "add rax, rax (REX2.W)"},
		{"d5 18 01 c8", 4, "rip=- rel=- enc=rex2 map=1byte", "add r16, rcx"},
		{"d5 40 8b 05 11 22 33 44", 8, "rip=4 disp=4:4 rel=- enc=rex2 map=1byte", "mov r16d, dword ptr [rip + disp32]"},
		{"d5 10 b8 11 22 33 44", 7, "imm=3:4 rip=- rel=- enc=rex2 map=1byte", "mov r16d, imm32"},
		{"d5 18 b8 11 22 33 44 55 66 77 88", 11, "imm=3:8 rip=- rel=- enc=rex2 map=1byte", "mov r16, imm64"},
		{"d5 10 81 c0 11 22 33 44", 8, "imm=4:4 rip=- rel=- enc=rex2 map=1byte", "add r16d, imm32"},
		{"d5 18 83 c0 11", 5, "imm=4:1 rip=- rel=- enc=rex2 map=1byte", "add r16, imm8"},
		{"d5 30 89 44 08 11", 6, "disp=5:1 rip=- rel=- enc=rex2 map=1byte", "mov dword ptr [r16 + r17 + 0x11], eax"},
		{"d5 90 af c0", 4, "rip=- rel=- enc=rex2 map=0f", "imul eax, r16d (map 1)"},
		{"d5 c0 b6 44 24 11", 6, "disp=5:1 rip=- rel=- enc=rex2 map=0f", "movzx r16d, byte ptr [rsp + 0x11] (map 1)"},
		{"d5 c0 4c 05 11 22 33 44", 8, "rip=4 disp=4:4 rel=- enc=rex2 map=0f", "cmovl r16d, dword ptr [rip + disp32] (map 1)"},
		{"66 d5 10 81 c0 11 22", 7, "imm=5:2 rip=- rel=- enc=rex2 map=1byte", "add r16w, imm16 (66 before REX2)"},
		{"d5 00 a1 11 22 33 44 55 66 77 88", 11, "rip=- enc=rex2 map=1byte", "jmpabs imm64"},
	} {
		v := add(hv("rex2", "intel", c.hex, c.n, c.fields, c.text, apx))
		v.noObj = true
	}
	add(hv("rex2", "intel", "d5", -1, "", "REX2 with no payload", apx))
	add(hv("rex2", "intel", "d5 08", -1, "", "REX2 with no opcode", apx))
	add(hv("rex2", "intel", "d5 08 01", -1, "", "REX2 add with no ModRM", apx))
	add(hv("rex2", "intel", "d5 18 b8 11 22 33 44", -1, "", "REX2.W mov r16, imm64 cut after 4 immediate bytes", apx))
	return vs
}

// limitVectors lists truncations inside prefixes and escapes, and instructions longer than 15 bytes.
func limitVectors() (vs []*vector) {
	add := func(v *vector) *vector { vs = append(vs, v); return v }
	// Truncation inside prefixes and escapes.
	for _, c := range []struct{ hex, text string }{
		{"66", "a prefix alone"}, {"f3 0f", "prefix and 0F"}, {"0f", "0F alone"}, {"0f 38", "0F 38 alone"}, {"0f 3a 0f c1", "palignr without imm8"},
		{"48", "REX alone"}, {"c5", "VEX2 escape alone"}, {"c4 e2", "VEX3 cut in its payload"}, {"62 f1 7c", "EVEX cut in its payload"},
		{"62 f1 7c 48", "EVEX without opcode"}, {"8f e8", "XOP cut in its payload"}, {"0f 0f c1", "3DNow! without its opcode suffix"},
		{"0f 0f 05 11 22 33 44", "3DNow! RIP-relative without its opcode suffix"}, {"2e 2e 2e 2e 2e 2e 2e 2e", "eight prefixes alone"},
		{"e8 11 22 33", "call rel32 cut"}, {"48 b8 11 22 33 44 55 66 77", "movabs cut"}, {"c8 11 22", "enter without imm8"},
		{"f7 05 11 22 33 44 55 66 77", "test [rip], imm32 cut in the immediate"}, {"8b 04", "mov with SIB missing"}, {"8b 44 24", "mov with disp8 missing"},
	} {
		add(hv("truncated", "any", c.hex, -1, "", c.text, "a proper prefix of an instruction ends before it does"))
	}

	// Too long: more than 15 bytes with no valid end inside them.
	tl := "an instruction longer than 15 bytes raises #GP (Intel SDM Vol. 2A §2.1; AMD APM Vol. 3 §1.1)"
	add(hv("toolong", "any", "66 66 66 66 66 66 66 66 66 66 66 66 66 66 66 90", -2, "", "fifteen 66 prefixes and nop", tl))
	add(hv("toolong", "any", "f3 f3 f3 f3 f3 f3 f3 f3 f3 f3 f3 48 0f b8 c1", 15, "rip=- rel=- enc=legacy map=0f",
		"popcnt rax, rcx with eleven F3: 15 bytes", "exactly 15 bytes is allowed ("+tl+"); an Intel CPU executes it"))
	add(hv("toolong", "any", "f3 f3 f3 f3 f3 f3 f3 f3 f3 f3 f3 f3 48 0f b8 c1", -2, "", "popcnt rax, rcx with twelve F3: 16 bytes", tl))
	add(hv("toolong", "any", "26 2e 36 3e 64 65 66 67 f0 f2 f3 26 2e 36 3e 64 01 08", -2, "", "sixteen prefixes before add", tl))
	add(hv("toolong", "any", "2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 2e 90", -2, "", "twenty prefixes and nop", tl))
	add(hv("toolong", "any", "67 67 67 67 67 67 67 67 c4 e3 7d 18 44 24 11 22", -2, "", "eight 67 and vinsertf128 with disp8 and imm8: 16 bytes", tl))
	return vs
}
