// Differential test of the x86-64 decoder against GNU objdump.
//
// objdump disassembles the executable sections of real x86-64 ELF files;
// every instruction it prints is decoded again by this package at the same
// address, from the same section bytes, and the two lengths must agree.
//
// Run the sample (a few /usr/bin programs and a 2 MB window of a large
// library, about 30 s at most):
//
//	go test ./decode/ -run TestObjdumpDifferential -v
//
// Run everything (every ELF file under /usr/bin, plus libLLVM-15, cc1, libc
// and libstdc++):
//
//	PROBEOPT_LONG=1 go test ./decode/ -run TestObjdumpDifferential -v -timeout 3h
//
// The only accepted disagreements are listed in testdata/objdump-allow.txt,
// each with the reason objdump is wrong there.

package decode_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/internal/testenv"
)

// objdumpJob is one file, or one address window of it, to compare.
type objdumpJob struct {
	path        string
	start, stop uint64 // virtual address window; 0, 0 means every executable section
}

// textSection is an executable section's address range and bytes.
type textSection struct {
	addr uint64
	data []byte
}

// allowEntry is one accepted disagreement.
type allowEntry struct {
	re       *regexp.Regexp
	outcomes []string // what the decoder says for the entry to apply: invalid, toolong, length
	src      string
	why      string
}

// applies reports whether the entry accepts the decoder's answer on h.
func (a allowEntry) applies(h string, err error) bool {
	outcome := "length"
	switch {
	case errors.Is(err, decode.ErrInvalid):
		outcome = "invalid"
	case errors.Is(err, decode.ErrTooLong):
		outcome = "toolong"
	case err != nil:
		return false
	}
	for _, o := range a.outcomes {
		if o == outcome {
			return a.re.MatchString(h)
		}
	}
	return false
}

// diffStats accumulates the comparison of one or more files.
type diffStats struct {
	compared int // instructions whose lengths were compared
	branches int // relative branches among them, whose targets were compared
	bad      int // objdump printed (bad) or .byte: not compared
	cut      int // objdump stopped the instruction at a symbol or section end: not compared
	allowed  int // mismatches accepted by the allow-list
	byEntry  map[string]int
	groups   map[string]*mismatchGroup
}

// mismatchGroup is a family of mismatches with the same shape.
type mismatchGroup struct {
	count    int
	examples []string
}

// add merges o into s.
func (s *diffStats) add(o *diffStats) {
	s.compared += o.compared
	s.branches += o.branches
	s.bad += o.bad
	s.cut += o.cut
	s.allowed += o.allowed
	for k, n := range o.byEntry {
		s.byEntry[k] += n
	}
	for k, g := range o.groups {
		m := s.groups[k]
		if m == nil {
			m = &mismatchGroup{}
			s.groups[k] = m
		}
		m.count += g.count
		for _, e := range g.examples {
			if len(m.examples) < 3 {
				m.examples = append(m.examples, e)
			}
		}
	}
}

// mismatch counts one disagreement in its group and keeps a few examples.
func (s *diffStats) mismatch(key, example string) {
	g := s.groups[key]
	if g == nil {
		g = &mismatchGroup{}
		s.groups[key] = g
	}
	g.count++
	if len(g.examples) < 3 {
		g.examples = append(g.examples, example)
	}
}

// loadObjdumpAllow reads the allow-list: one entry a line, tab-separated: a
// regular expression over the lowercase hex of the bytes at the instruction
// address (up to 15 bytes); what the decoder says there for the entry to
// apply, a comma-separated list of "invalid" (ErrInvalid), "toolong"
// (ErrTooLong) and "length" (a length other than objdump's); and the reason.
// # starts a comment line.
func loadObjdumpAllow(path string) ([]allowEntry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var es []allowEntry
	for i, line := range strings.Split(string(data), "\n") {
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		cols := strings.SplitN(line, "\t", 3)
		if len(cols) != 3 || strings.TrimSpace(cols[2]) == "" {
			return nil, fmt.Errorf("%s:%d: an entry needs a pattern, the outcomes and the reason, tab-separated", path, i+1)
		}
		outcomes := strings.Split(cols[1], ",")
		for _, o := range outcomes {
			if o != "invalid" && o != "toolong" && o != "length" {
				return nil, fmt.Errorf("%s:%d: unknown outcome %q", path, i+1, o)
			}
		}
		re, err := regexp.Compile(cols[0])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		es = append(es, allowEntry{re: re, outcomes: outcomes, src: cols[0], why: strings.TrimSpace(cols[2])})
	}
	return es, nil
}

// executableSections returns the x86-64 file's executable sections and the
// sorted addresses of its symbols, or an error when it is not an x86-64 ELF
// file.
func executableSections(path string) ([]textSection, []uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return nil, nil, fmt.Errorf("%s: not an x86-64 ELF file", path)
	}
	var syms []uint64
	for _, get := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		ss, _ := get() // a stripped file has no .symtab
		for _, s := range ss {
			if s.Value != 0 && s.Section != elf.SHN_UNDEF {
				syms = append(syms, s.Value)
			}
		}
	}
	sort.Slice(syms, func(i, j int) bool { return syms[i] < syms[j] })
	var ts []textSection
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 || s.Size == 0 {
			continue
		}
		data, err := s.Data()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: section %s: %w", path, s.Name, err)
		}
		ts = append(ts, textSection{s.Addr, data})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].addr < ts[j].addr })
	return ts, syms, nil
}

// symbolIn reports whether a symbol starts in [lo, hi).
func symbolIn(syms []uint64, lo, hi uint64) bool {
	i := sort.Search(len(syms), func(i int) bool { return syms[i] >= lo })
	return i < len(syms) && syms[i] < hi
}

// sectionAt returns the bytes from addr to the end of its section.
func sectionAt(ts []textSection, addr uint64) []byte {
	i := sort.Search(len(ts), func(i int) bool { return ts[i].addr+uint64(len(ts[i].data)) > addr })
	if i == len(ts) || addr < ts[i].addr {
		return nil
	}
	return ts[i].data[addr-ts[i].addr:]
}

// objdumpLine is one instruction line of objdump -d -w output.
type objdumpLine struct {
	addr  uint64
	bytes []byte
	text  string
}

// parseObjdumpLine parses "  addr:\txx xx xx   \ttext". ok is false for any
// other line (headers, symbols, blank lines). text is "" for a continuation
// line of a wrapped instruction.
func parseObjdumpLine(line []byte, buf []byte) (objdumpLine, bool) {
	var l objdumpLine
	line = bytes.TrimLeft(line, " ")
	colon := bytes.IndexByte(line, ':')
	if colon <= 0 || colon+1 >= len(line) || line[colon+1] != '\t' {
		return l, false
	}
	addr, err := strconv.ParseUint(string(line[:colon]), 16, 64)
	if err != nil {
		return l, false
	}
	l.addr = addr
	rest := line[colon+2:]
	raw := rest
	if tab := bytes.IndexByte(rest, '\t'); tab >= 0 {
		raw = rest[:tab]
		l.text = strings.TrimSpace(string(rest[tab+1:]))
	}
	buf = buf[:0]
	for _, f := range bytes.Fields(raw) {
		if len(f) != 2 {
			return l, false
		}
		var b [1]byte
		if _, err := hex.Decode(b[:], f); err != nil {
			return l, false
		}
		buf = append(buf, b[0])
	}
	if len(buf) == 0 {
		return l, false
	}
	l.bytes = buf
	return l, true
}

// compareFile runs objdump over one job and decodes every instruction again.
func compareFile(objdump string, job objdumpJob, allow []allowEntry) (*diffStats, error) {
	st := &diffStats{groups: map[string]*mismatchGroup{}, byEntry: map[string]int{}}
	secs, syms, err := executableSections(job.path)
	if err != nil {
		return nil, err
	}
	args := []string{"-d", "-w", "-z", "--insn-width=15"}
	if job.stop != 0 {
		// objdump cuts the instruction that crosses --stop-address, so it
		// runs 32 bytes further and only instructions starting before
		// job.stop are compared.
		args = append(args, fmt.Sprintf("--start-address=%#x", job.start), fmt.Sprintf("--stop-address=%#x", job.stop+32))
	}
	args = append(args, job.path)
	cmd := exec.Command(objdump, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	r := bufio.NewReaderSize(out, 1<<20)
	var (
		pending objdumpLine
		have    bool
		buf     = make([]byte, 0, 32)
		pbuf    = make([]byte, 0, 32)
	)
	c := &lineComparer{st: st, job: job, secs: secs, syms: syms, allow: allow}
	flush := func() {
		if have {
			have = false
			c.compare(pending)
		}
	}
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A very long line (a long symbol name): skip the rest of it.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = r.ReadSlice('\n')
			}
			continue
		}
		if len(line) > 0 {
			l, ok := parseObjdumpLine(line, buf)
			switch {
			case !ok:
				// A header, a symbol or a blank line.
			case l.text == "" && have && l.addr == pending.addr+uint64(len(pending.bytes)):
				// Continuation of a wrapped instruction.
				pending.bytes = append(pending.bytes, l.bytes...)
			default:
				flush()
				pbuf = append(pbuf[:0], l.bytes...)
				l.bytes = pbuf
				pending, have = l, true
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			cmd.Wait()
			return nil, err
		}
	}
	flush()
	if err := cmd.Wait(); err != nil {
		return nil, fmt.Errorf("objdump %s: %w: %s", job.path, err, stderr.Bytes())
	}
	return st, nil
}

// lineComparer decodes again the instructions objdump lists for one job
// and counts them in st.
type lineComparer struct {
	st    *diffStats
	job   objdumpJob
	secs  []textSection
	syms  []uint64
	allow []allowEntry
	inst  decode.X86Inst
	dec   decode.X86Decoder // VendorAMD, as objdump's default
}

// compare decodes the instruction of objdump line l from the section's
// bytes and counts the outcome.
func (c *lineComparer) compare(l objdumpLine) {
	if c.job.stop != 0 && l.addr >= c.job.stop {
		return
	}
	if strings.Contains(l.text, "(bad)") || strings.HasPrefix(l.text, ".byte") {
		c.st.bad++
		return
	}
	src := sectionAt(c.secs, l.addr)
	if len(src) < len(l.bytes) {
		// Not in an executable section, or running past its end.
		c.st.bad++
		return
	}
	if !bytes.Equal(src[:len(l.bytes)], l.bytes) {
		c.st.mismatch("objdump bytes differ from the section bytes", fmt.Sprintf("%s %#x", c.job.path, l.addr))
		return
	}
	end := len(src) == len(l.bytes) // the instruction ends its section
	if len(src) > 15 {
		src = src[:15]
	}
	err := c.dec.Decode(src, l.addr, &c.inst)
	if err == nil && c.inst.Len == len(l.bytes) {
		c.st.compared++
		if c.inst.Branch.Relative() {
			c.st.branches++
			if key, ok := checkBranchTarget(&c.inst, l.text); !ok {
				c.st.mismatch(key, fmt.Sprintf("%s %#x: % x  objdump %q, decoder target %#x, text %q",
					filepath.Base(c.job.path), l.addr, l.bytes, l.text, c.inst.Target, c.inst.Text("gnu")))
			}
		}
		return
	}
	// objdump stops decoding at a symbol (and at a section end), so an
	// instruction running across one is printed cut short.
	n := uint64(len(l.bytes))
	if (err == nil && c.inst.Len > len(l.bytes) && symbolIn(c.syms, l.addr+n, l.addr+uint64(c.inst.Len))) || (end && errors.Is(err, decode.ErrTruncated)) {
		c.st.cut++
		return
	}
	c.st.compared++
	h := hex.EncodeToString(src)
	for _, a := range c.allow {
		if a.applies(h, err) {
			c.st.allowed++
			c.st.byEntry[a.why]++
			return
		}
	}
	got := fmt.Sprintf("length %+d", c.inst.Len-len(l.bytes))
	if err != nil {
		got = err.Error()
	}
	key := fmt.Sprintf("objdump %s, decoder %s", mnemonicOf(l.text), got)
	c.st.mismatch(key, fmt.Sprintf("%s %#x: % x | % x  %s", filepath.Base(c.job.path), l.addr, l.bytes, src[len(l.bytes):min(len(src), len(l.bytes)+4)], l.text))
}

// checkBranchTarget compares a relative branch's target, as the decoder
// computes it and as its text shows it, with the target objdump prints (the
// first hexadecimal operand, "401020 <sym+0x10>"). It returns the mismatch
// group on disagreement.
func checkBranchTarget(inst *decode.X86Inst, text string) (string, bool) {
	var want uint64
	found := false
	fs := strings.Fields(text)
	for _, f := range fs[1:] {
		// "401020 <sym+0x10>" with symbols, "0x401020" without.
		if v, err := strconv.ParseUint(strings.TrimPrefix(f, "0x"), 16, 64); err == nil {
			want, found = v, true
			break
		}
	}
	if !found {
		return fmt.Sprintf("objdump %s: no branch target in its text", mnemonicOf(text)), false
	}
	if inst.OpSize == 16 {
		// objdump does not truncate the target of a branch with a 16-bit
		// operand size; an AMD CPU keeps its low 16 bits (AMD APM vol. 3,
		// near branches), which is what the decoder says.
		want &= 0xffff
	}
	if inst.Target != want {
		return fmt.Sprintf("objdump %s, decoder target differs", mnemonicOf(text)), false
	}
	if !strings.Contains(inst.Text("gnu"), fmt.Sprintf("%#x", want)) {
		return fmt.Sprintf("objdump %s, decoder text shows another target", mnemonicOf(text)), false
	}
	return "", true
}

// mnemonicOf returns the mnemonic of an objdump text, after any prefixes.
func mnemonicOf(text string) string {
	fs := strings.Fields(text)
	for _, f := range fs {
		switch f {
		case "lock", "rep", "repz", "repnz", "repe", "repne", "data16", "addr32", "cs", "ds", "es", "ss", "fs", "gs",
			"notrack", "bnd", "xacquire", "xrelease", "rex", "rex.W":
			continue
		}
		return f
	}
	return text
}

// systemLibDirs are the standard places the long run looks for libraries.
var systemLibDirs = []string{"/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib"}

// findSystemLibrary returns the first existing path of name in systemLibDirs, or "".
func findSystemLibrary(name string) string {
	for _, d := range systemLibDirs {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// isRegularFile reports whether p exists and is a regular file.
func isRegularFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

// isX86ELF reports whether path is a regular x86-64 ELF file.
func isX86ELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var hdr [20]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		return false
	}
	return string(hdr[:4]) == "\x7fELF" && hdr[4] == 2 && hdr[5] == 1 && hdr[18] == byte(elf.EM_X86_64) && hdr[19] == 0
}

// longJobs lists every ELF file under /usr/bin (each file once) and the
// large libraries.
func longJobs(t *testing.T) []objdumpJob {
	var jobs []objdumpJob
	seen := map[string]bool{}
	addFile := func(p string) {
		real, err := filepath.EvalSymlinks(p)
		if err != nil || seen[real] || !isRegularFile(real) || !isX86ELF(real) {
			return
		}
		seen[real] = true
		jobs = append(jobs, objdumpJob{path: real})
	}
	libs := []string{"libLLVM-15.so.1", "libc.so.6", "libstdc++.so.6"}
	for _, name := range libs {
		p := findSystemLibrary(name)
		if p == "" {
			p = filepath.Join(systemLibDirs[0], name)
		}
		testenv.MustHaveFile(t, p)
		addFile(p)
	}
	addFile(testenv.MustHaveCC1(t))
	ents, err := os.ReadDir("/usr/bin")
	if err != nil {
		testenv.Unavailable(t, "read /usr/bin: %v", err)
	}
	for _, e := range ents {
		addFile(filepath.Join("/usr/bin", e.Name()))
	}
	return jobs
}

// sampleJobs lists a few small programs and a 2 MB window of a large
// library: enough to cover common compiler output in a normal test run.
func sampleJobs() []objdumpJob {
	var jobs []objdumpJob
	for _, name := range []string{"ls", "grep", "sed", "tar", "gzip", "objdump"} {
		p, err := filepath.EvalSymlinks(filepath.Join("/usr/bin", name))
		if err == nil && isX86ELF(p) {
			jobs = append(jobs, objdumpJob{path: p})
		}
	}
	big := []string{testenv.CC1Path(), findSystemLibrary("libLLVM-15.so.1"), findSystemLibrary("libstdc++.so.6"), findSystemLibrary("libc.so.6")}
	for _, p := range big {
		if p == "" || !isX86ELF(p) {
			continue
		}
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		s := f.Section(".text")
		f.Close()
		if s == nil || s.Size == 0 {
			continue
		}
		const window = 2 << 20
		start := s.Addr + s.Size/3
		if s.Size < 3*window {
			start = s.Addr
		}
		jobs = append(jobs, objdumpJob{path: p, start: start, stop: min(start+window, s.Addr+s.Size)})
		break
	}
	return jobs
}

// TestObjdumpDifferential compares instruction lengths with GNU objdump on
// real binaries.
func TestObjdumpDifferential(t *testing.T) {
	t.Parallel()
	objdump := testenv.MustHaveTool(t, "objdump")
	allow, err := loadObjdumpAllow("testdata/objdump-allow.txt")
	if err != nil {
		t.Fatal(err)
	}
	var jobs []objdumpJob
	if testenv.Long() {
		jobs = longJobs(t)
	} else {
		jobs = sampleJobs()
	}
	if len(jobs) == 0 {
		testenv.Unavailable(t, "no x86-64 ELF files found to disassemble")
	}
	workers := min(runtime.GOMAXPROCS(0), 2)
	total := &diffStats{groups: map[string]*mismatchGroup{}, byEntry: map[string]int{}}
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		next   = make(chan objdumpJob)
		failed []string
		files  int
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range next {
				st, err := compareFile(objdump, job, allow)
				mu.Lock()
				if err != nil {
					failed = append(failed, err.Error())
				} else {
					files++
					total.add(st)
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range jobs {
		next <- j
	}
	close(next)
	wg.Wait()
	for _, f := range failed {
		t.Errorf("%s", f)
	}
	keys := make([]string, 0, len(total.groups))
	mismatches := 0
	for k, g := range total.groups {
		keys = append(keys, k)
		mismatches += g.count
	}
	sort.Slice(keys, func(i, j int) bool { return total.groups[keys[i]].count > total.groups[keys[j]].count })
	for i, k := range keys {
		if i == 100 {
			t.Errorf("... and %d more mismatch groups", len(keys)-i)
			break
		}
		g := total.groups[k]
		t.Errorf("%d x %s; e.g.\n\t%s", g.count, k, strings.Join(g.examples, "\n\t"))
	}
	t.Logf("%d files, %d instructions compared (%d relative branches with their targets), %d mismatches in %d groups, %d allowed by %s; not compared: %d (bad)/.byte lines, %d cut at a symbol or section end",
		files, total.compared, total.branches, mismatches, len(keys), total.allowed, "testdata/objdump-allow.txt", total.bad, total.cut)
	for _, a := range allow {
		if n := total.byEntry[a.why]; n > 0 {
			t.Logf("allowed %d x: %s", n, a.why)
		}
	}
	if total.compared == 0 && len(failed) == 0 {
		t.Errorf("no instruction was compared")
	}
}
