package elfscan

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/probeopt/probeopt/decode"
)

// ArgKind says where a USDT argument's value is.
type ArgKind uint8

const (
	ArgConst ArgKind = iota + 1 // a constant: x86-64 "$5", arm64 "5"
	ArgReg                      // a register: "%rdi", "x0"
	ArgMem                      // memory: "-8(%rbp)", "(%rdx,%rsi,4)", "counter(%rip)", "[sp, 16]"
)

func (k ArgKind) String() string {
	switch k {
	case ArgConst:
		return "const"
	case ArgReg:
		return "reg"
	case ArgMem:
		return "mem"
	}
	return "unknown"
}

// USDTArg is one parsed USDT argument, "SIZE@OPERAND".
type USDTArg struct {
	// Size is the value's size in bytes (1, 2, 4 or 8); 0 when the
	// argument has no "SIZE@" part (old <sys/sdt.h>).
	Size int
	// Signed is set when SIZE was negative.
	Signed bool
	Kind   ArgKind
	// Value is the constant (ArgConst) or the displacement (ArgMem).
	Value int64
	// Reg is the register (ArgReg) or the base register (ArgMem, "" for
	// none), as written without "%": "rdi", "r8b", "x0", "sp".
	Reg string
	// Index and Scale are the index register and its factor (1, 2, 4, 8)
	// of an x86-64 memory operand; "" and 0 when there is none.
	Index string
	Scale int
	// Symbol is the symbol a memory operand's displacement is relative
	// to, "counter" in "counter+8(%rip)"; "" when there is none.
	Symbol string
	// Segment is an x86-64 segment override ("fs" in "%fs:0x28"), "" if none.
	Segment string
	// Text is the argument as written.
	Text string
}

// ParseUSDTArgs parses a USDT argument string such as
// "-4@%edi 8@-16(%rbp) 4@$3" (x86-64) or "-4@x0 8@[sp, 16] 4@5" (arm64).
// Arguments are separated by spaces outside brackets. An error wraps
// ErrBadSpec and names the argument.
func ParseUSDTArgs(arch decode.Arch, s string) ([]USDTArg, error) {
	var args []USDTArg
	for i, text := range splitArgs(s) {
		a, err := parseUSDTArg(arch, text)
		if err != nil {
			return nil, fmt.Errorf("%w: USDT argument %d %q: %v", ErrBadSpec, i+1, text, err)
		}
		args = append(args, a)
	}
	return args, nil
}

// splitArgs splits on spaces that are not inside () or [].
func splitArgs(s string) []string {
	var out []string
	depth, start := 0, -1
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '(' || c == '[':
			depth++
		case (c == ')' || c == ']') && depth > 0:
			depth--
		case (c == ' ' || c == '\t') && depth == 0:
			if start >= 0 {
				out = append(out, s[start:i])
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, s[start:])
	}
	return out
}

func parseUSDTArg(arch decode.Arch, text string) (USDTArg, error) {
	a := USDTArg{Text: text}
	op := text
	if at := strings.IndexByte(text, '@'); at >= 0 {
		n, err := strconv.Atoi(text[:at])
		if err != nil {
			return a, fmt.Errorf("size %q is not a number", text[:at])
		}
		if n < 0 {
			a.Signed, n = true, -n
		}
		switch n {
		case 1, 2, 4, 8:
		default:
			return a, fmt.Errorf("size %d, want 1, 2, 4 or 8", n)
		}
		a.Size, op = n, text[at+1:]
	}
	if op == "" {
		return a, fmt.Errorf("no operand")
	}
	var err error
	if arch == decode.ARM64 {
		err = parseARM64Operand(&a, op)
	} else {
		err = parseX86Operand(&a, op)
	}
	return a, err
}

// parseInt parses a decimal or 0x-prefixed hexadecimal integer with an
// optional sign.
func parseInt(s string) (int64, error) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	if s == "" || s[0] == '-' || s[0] == '+' {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	u, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// x86Regs are the general-purpose register names an x86-64 USDT argument
// may use, plus rip.
var x86Regs = func() map[string]bool {
	m := map[string]bool{"rip": true, "eip": true, "ah": true, "bh": true, "ch": true, "dh": true}
	for _, r := range [][4]string{
		{"rax", "eax", "ax", "al"}, {"rbx", "ebx", "bx", "bl"}, {"rcx", "ecx", "cx", "cl"}, {"rdx", "edx", "dx", "dl"},
		{"rsi", "esi", "si", "sil"}, {"rdi", "edi", "di", "dil"}, {"rbp", "ebp", "bp", "bpl"}, {"rsp", "esp", "sp", "spl"},
	} {
		for _, n := range r {
			m[n] = true
		}
	}
	for i := 8; i < 16; i++ {
		for _, suf := range []string{"", "d", "w", "b"} {
			m[fmt.Sprintf("r%d%s", i, suf)] = true
		}
	}
	return m
}()

// x86Reg parses "%NAME".
func x86Reg(s string) (string, error) {
	if !strings.HasPrefix(s, "%") || !x86Regs[s[1:]] {
		return "", fmt.Errorf("%q is not an x86-64 register", s)
	}
	return s[1:], nil
}

func parseX86Operand(a *USDTArg, op string) error {
	switch {
	case strings.HasPrefix(op, "$"):
		v, err := parseInt(op[1:])
		if err != nil {
			return err
		}
		a.Kind, a.Value = ArgConst, v
		return nil
	case strings.HasPrefix(op, "%") && !strings.ContainsAny(op, ":("):
		r, err := x86Reg(op)
		if err != nil {
			return err
		}
		a.Kind, a.Reg = ArgReg, r
		return nil
	}
	a.Kind = ArgMem
	if seg, rest, ok := strings.Cut(op, ":"); ok {
		switch seg {
		case "%fs", "%gs", "%cs", "%ds", "%es", "%ss":
			a.Segment, op = seg[1:], rest
		default:
			return fmt.Errorf("%q is not a segment register", seg)
		}
	}
	disp, inner := op, ""
	if i := strings.IndexByte(op, '('); i >= 0 {
		if !strings.HasSuffix(op, ")") {
			return fmt.Errorf("unbalanced parentheses")
		}
		disp, inner = op[:i], op[i+1:len(op)-1]
	}
	if err := parseDisp(a, disp); err != nil {
		return err
	}
	if inner == "" {
		if disp == "" {
			return fmt.Errorf("empty memory operand")
		}
		return nil // an absolute address: "counter" or "0x601040"
	}
	parts := strings.Split(inner, ",")
	if len(parts) > 3 {
		return fmt.Errorf("too many parts in (%s)", inner)
	}
	if parts[0] != "" {
		r, err := x86Reg(strings.TrimSpace(parts[0]))
		if err != nil {
			return err
		}
		a.Reg = r
	}
	if len(parts) >= 2 {
		r, err := x86Reg(strings.TrimSpace(parts[1]))
		if err != nil {
			return err
		}
		a.Index, a.Scale = r, 1
		if len(parts) == 3 {
			sc, err := strconv.Atoi(strings.TrimSpace(parts[2]))
			if err != nil || sc != 1 && sc != 2 && sc != 4 && sc != 8 {
				return fmt.Errorf("scale %q, want 1, 2, 4 or 8", parts[2])
			}
			a.Scale = sc
		}
	}
	if a.Reg == "" && a.Index == "" {
		return fmt.Errorf("no register in (%s)", inner)
	}
	return nil
}

// parseDisp parses an x86-64 displacement: "", "-16", "0x10", "counter",
// "counter+8", "counter-8", "40+CheckpointStats": numbers added up, and at
// most one symbol.
func parseDisp(a *USDTArg, d string) error {
	if d == "" {
		return nil
	}
	var sum int64
	for start := 0; start < len(d); {
		end := start + 1
		for end < len(d) && d[end] != '+' && d[end] != '-' {
			end++
		}
		term := d[start:end]
		start = end
		if v, err := parseInt(term); err == nil {
			sum += v
			continue
		}
		sym := strings.TrimPrefix(term, "+")
		if a.Symbol != "" || !isSymbol(sym) {
			return fmt.Errorf("displacement %q is not a sum of numbers and one symbol", d)
		}
		a.Symbol = sym
	}
	a.Value = sum
	return nil
}

// isSymbol reports whether s looks like an assembler symbol name.
func isSymbol(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c == '.' || c == '$' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// arm64Reg parses "xN", "wN", "sp", "wsp", "xzr", "wzr".
func arm64Reg(s string) (string, error) {
	switch s {
	case "sp", "wsp", "xzr", "wzr":
		return s, nil
	}
	if len(s) >= 2 && (s[0] == 'x' || s[0] == 'w') {
		if n, err := strconv.Atoi(s[1:]); err == nil && n >= 0 && n <= 30 && strconv.Itoa(n) == s[1:] {
			return s, nil
		}
	}
	return "", fmt.Errorf("%q is not an arm64 register", s)
}

func parseARM64Operand(a *USDTArg, op string) error {
	if strings.HasPrefix(op, "[") {
		if !strings.HasSuffix(op, "]") {
			return fmt.Errorf("unbalanced brackets")
		}
		parts := strings.Split(op[1:len(op)-1], ",")
		if len(parts) > 2 {
			return fmt.Errorf("too many parts in %s", op)
		}
		r, err := arm64Reg(strings.TrimSpace(parts[0]))
		if err != nil {
			return err
		}
		a.Kind, a.Reg = ArgMem, r
		if len(parts) == 2 {
			v, err := parseInt(strings.TrimPrefix(strings.TrimSpace(parts[1]), "#"))
			if err != nil {
				return err
			}
			a.Value = v
		}
		return nil
	}
	if r, err := arm64Reg(op); err == nil {
		a.Kind, a.Reg = ArgReg, r
		return nil
	}
	v, err := parseInt(strings.TrimPrefix(op, "#"))
	if err != nil {
		return fmt.Errorf("%q is neither a register, a memory operand nor a constant", op)
	}
	a.Kind, a.Value = ArgConst, v
	return nil
}
