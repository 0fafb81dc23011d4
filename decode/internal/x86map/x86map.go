// Package x86map reads the x86-64 opcode description (decode/x86map.txt)
// and generates the decoder's lookup tables from it. It is used by the
// generator command and by the test that checks the generated file is up
// to date.
package x86map

import (
	"bufio"
	"bytes"
	"fmt"
	"go/format"
	"sort"
	"strconv"
	"strings"
)

// Maps in the order of the generated index; the names are those of the
// `map` lines in the description.
var mapNames = []string{
	"1byte", "0f", "0f38", "0f3a", "3dnow",
	"vex1", "vex2", "vex3",
	"evex1", "evex2", "evex3", "evex5", "evex6",
	"xop8", "xop9", "xopa",
}

// A line is one parsed description line.
type line struct {
	lineno int
	map_   string
	prefix int // -1 any, 0 NP, 1 66, 2 F3, 3 F2
	op     int
	// ModRM selection.
	reg   int // -1 any
	mod   int // -1 any, 0 memory, 3 register
	exact int // -1, or the exact ModRM byte
	isDef bool

	mnem    string
	invalid bool
	ops     []operand
	impR    uint32
	impW    uint32
	attrs   map[string]string
}

type operand struct {
	text   string // as written, without access prefix
	kind   string // generated constant name
	size   string
	access byte // 'r', 'w', '+', '&'
	fixed  int  // register number for fixed registers
}

func (l *line) specificity() int {
	switch {
	case l.exact >= 0:
		return 3
	case l.reg >= 0 && l.mod >= 0:
		return 2
	case l.reg >= 0 || l.mod >= 0:
		return 1
	}
	return 0
}

func (l *line) matches(modrm int) bool {
	mod, reg := modrm>>6, (modrm>>3)&7
	if l.exact >= 0 {
		return modrm == l.exact
	}
	if l.reg >= 0 && reg != l.reg {
		return false
	}
	switch l.mod {
	case 0:
		return mod != 3
	case 3:
		return mod == 3
	}
	return true
}

var fixedRegs = map[string]int{
	"AL": 0, "CL": 1, "DL": 2, "BL": 3, "AH": 0, "CH": 1, "DH": 2, "BH": 3,
	"AX": 0, "CX": 1, "DX": 2, "BX": 3,
	"eAX": 0, "rAX": 0, "rCX": 1, "rDX": 2, "rBX": 3, "rSP": 4, "rBP": 5, "rSI": 6, "rDI": 7,
	"r8": 8, "r9": 9, "r10": 10, "r11": 11, "r12": 12, "r13": 13, "r14": 14, "r15": 15,
}

func parseOperand(tok string) (operand, error) {
	o := operand{access: 'r', fixed: -1}
	switch tok[0] {
	case '=':
		o.access, tok = 'w', tok[1:]
	case '+':
		o.access, tok = '+', tok[1:]
	case '&':
		o.access, tok = '&', tok[1:]
	}
	if tok == "" {
		return o, fmt.Errorf("empty operand")
	}
	o.text = tok
	if r, ok := fixedRegs[tok]; ok {
		o.kind, o.fixed = "opFixed", r
		return o, nil
	}
	switch tok {
	case "1":
		o.kind = "opConst1"
		return o, nil
	case "FS", "GS":
		o.kind = "opSeg"
		return o, nil
	case "Ib", "Iw", "Iz", "Iv", "Id":
		o.kind, o.size = "opImm", tok[1:]
		return o, nil
	case "Jb", "Jz":
		o.kind, o.size = "opRel", tok[1:]
		return o, nil
	}
	c, rest := tok[0], tok[1:]
	o.size = rest
	switch c {
	case 'E':
		o.kind = "opE"
	case 'G':
		o.kind = "opG"
	case 'R':
		o.kind = "opR"
	case 'M':
		o.kind = "opM"
	case 'B':
		o.kind = "opB"
	case 'Z':
		o.kind = "opZ"
	case 'X':
		o.kind = "opX"
	case 'Y':
		o.kind = "opY"
	case 'O':
		o.kind = "opO"
	case 'V', 'P', 'S', 'C', 'D', 'T', 'K':
		o.kind = "opVReg"
	case 'W', 'Q':
		o.kind = "opVRM"
	case 'U', 'N':
		o.kind = "opVRMReg"
	case 'H':
		o.kind = "opVVVV"
	case 'L':
		o.kind = "opIs4"
	default:
		return o, fmt.Errorf("unknown operand %q", tok)
	}
	return o, nil
}

func hasModRMOperand(ops []operand) bool {
	for _, o := range ops {
		switch o.kind {
		case "opE", "opG", "opR", "opM", "opVReg", "opVRM", "opVRMReg":
			return true
		}
	}
	return false
}

func parseKey(key string, l *line) ([]int, error) {
	l.prefix, l.reg, l.mod, l.exact = -1, -1, -1, -1
	if i := strings.IndexByte(key, ':'); i >= 0 {
		switch key[:i] {
		case "NP":
			l.prefix = 0
		case "66":
			l.prefix = 1
		case "F3":
			l.prefix = 2
		case "F2":
			l.prefix = 3
		default:
			return nil, fmt.Errorf("bad prefix selector %q", key[:i])
		}
		key = key[i+1:]
	}
	if key == "default" {
		l.isDef = true
		return nil, nil
	}
	if i := strings.IndexByte(key, '='); i >= 0 {
		v, err := strconv.ParseUint(key[i+1:], 16, 8)
		if err != nil || v < 0xC0 {
			return nil, fmt.Errorf("bad exact ModRM %q (must be a register form)", key[i+1:])
		}
		l.exact = int(v)
		key = key[:i]
	} else if i := strings.IndexByte(key, '/'); i >= 0 {
		sel := key[i+1:]
		key = key[:i]
		switch {
		case sel != "" && sel[0] >= '0' && sel[0] <= '7':
			l.reg = int(sel[0] - '0')
		case sel == "*m" || sel == "*r":
			// any reg; the mod restriction follows
		default:
			return nil, fmt.Errorf("bad group selector %q", sel)
		}
		switch sel[1:] {
		case "":
		case "m":
			l.mod = 0
		case "r":
			l.mod = 3
		default:
			return nil, fmt.Errorf("bad group selector %q", sel)
		}
	}
	lo, hi := key, key
	if i := strings.IndexByte(key, '-'); i >= 0 {
		lo, hi = key[:i], key[i+1:]
	}
	a, err1 := strconv.ParseUint(lo, 16, 8)
	b, err2 := strconv.ParseUint(hi, 16, 8)
	if err1 != nil || err2 != nil || b < a || len(lo) != 2 || len(hi) != 2 {
		return nil, fmt.Errorf("bad opcode %q", key)
	}
	var ops []int
	for v := a; v <= b; v++ {
		ops = append(ops, int(v))
	}
	return ops, nil
}

// parse reads the description into lines.
func parse(src []byte) ([]*line, error) {
	var out []*line
	cur := ""
	known := map[string]bool{}
	for _, n := range mapNames {
		known[n] = true
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	n := 0
	for sc.Scan() {
		n++
		text := sc.Text()
		if i := strings.IndexByte(text, '#'); i >= 0 {
			text = text[:i]
		}
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if f[0] == "map" {
			if len(f) != 2 || !known[f[1]] {
				return nil, fmt.Errorf("line %d: bad map line", n)
			}
			cur = f[1]
			continue
		}
		if cur == "" {
			return nil, fmt.Errorf("line %d: entry before any map", n)
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want KEY MNEMONIC OPERANDS", n)
		}
		tmpl := line{lineno: n, map_: cur, mnem: f[1], attrs: map[string]string{}}
		opcodes, err := parseKey(f[0], &tmpl)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		tmpl.invalid = tmpl.mnem == "-"
		if f[2] != "-" {
			for _, t := range strings.Split(f[2], ",") {
				o, err := parseOperand(t)
				if err != nil {
					return nil, fmt.Errorf("line %d: %w", n, err)
				}
				tmpl.ops = append(tmpl.ops, o)
			}
		}
		for _, t := range f[3:] {
			if t[0] == '@' {
				k, v, _ := strings.Cut(t[1:], "=")
				tmpl.attrs[k] = v
				continue
			}
			o, err := parseOperand(t)
			if err != nil || o.kind != "opFixed" {
				return nil, fmt.Errorf("line %d: bad implicit register %q", n, t)
			}
			bit := uint32(1) << o.fixed
			switch o.access {
			case 'r':
				tmpl.impR |= bit
			case 'w':
				tmpl.impW |= bit
			case '+':
				tmpl.impR |= bit
				tmpl.impW |= bit
			}
		}
		if len(tmpl.ops) > 4 {
			return nil, fmt.Errorf("line %d: more than 4 operands", n)
		}
		if tmpl.isDef {
			l := tmpl
			l.op = -1
			out = append(out, &l)
			continue
		}
		for _, op := range opcodes {
			l := tmpl
			l.op = op
			out = append(out, &l)
		}
	}
	return out, sc.Err()
}

// node is a decision tree node for one (map, opcode).
type node struct {
	leaf     *line // nil with children
	kind     string
	children []*node
}

func (n *node) key() string {
	if n == nil {
		return "nil"
	}
	if n.kind == "" {
		return fmt.Sprintf("L%p", n.leaf)
	}
	var b strings.Builder
	b.WriteString(n.kind + "(")
	for _, c := range n.children {
		b.WriteString(c.key() + ",")
	}
	b.WriteString(")")
	return b.String()
}

func leafNode(l *line) *node {
	if l == nil {
		return nil
	}
	return &node{leaf: l}
}

// choose picks the line for a prefix and ModRM value.
func choose(cands []*line, prefix, modrm int) *line {
	var best *line
	bestScore := -2
	for _, l := range cands {
		if l.prefix >= 0 && l.prefix != prefix {
			continue
		}
		if modrm >= 0 && !l.matches(modrm) {
			continue
		}
		s := l.specificity()
		if l.prefix >= 0 {
			s += 10
		}
		if l.isDef {
			s = -1 // the map's default yields to every listed form
		}
		if s > bestScore {
			best, bestScore = l, s
		}
	}
	return best
}

func same(ns []*node) bool {
	for _, n := range ns[1:] {
		if n.key() != ns[0].key() {
			return false
		}
	}
	return true
}

func buildModRM(cands []*line, prefix int, modrm bool) *node {
	if !modrm {
		return leafNode(choose(cands, prefix, -1))
	}
	slots := make([]*node, 16)
	for s := 0; s < 16; s++ {
		mod3, reg := s >= 8, s&7
		rms := make([]*node, 8)
		for rm := 0; rm < 8; rm++ {
			mod := 0
			if mod3 {
				mod = 3
			}
			rms[rm] = leafNode(choose(cands, prefix, mod<<6|reg<<3|rm))
		}
		if same(rms) {
			slots[s] = rms[0]
		} else {
			slots[s] = &node{kind: "selRM", children: rms}
		}
	}
	if same(slots) {
		return slots[0]
	}
	return &node{kind: "selModRM", children: slots}
}

type gen struct {
	lines  []*line
	leaves map[*line]int
	order  []*line
	nodes  []string // rendered selector nodes
	nodeID map[string]int
	sels   []int // flattened children ids
}

// Generate parses the description and returns the formatted Go source of
// the decoder tables for package decode.
func Generate(src []byte) ([]byte, error) {
	lines, err := parse(src)
	if err != nil {
		return nil, err
	}
	g := &gen{leaves: map[*line]int{}, nodeID: map[string]int{}}
	byMapOp := map[string]map[int][]*line{}
	defaults := map[string][]*line{}
	for _, l := range lines {
		if byMapOp[l.map_] == nil {
			byMapOp[l.map_] = map[int][]*line{}
		}
		if l.isDef {
			defaults[l.map_] = append(defaults[l.map_], l)
			continue
		}
		byMapOp[l.map_][l.op] = append(byMapOp[l.map_][l.op], l)
	}
	// Entry 0 is "no entry" (unknown opcode).
	g.order = append(g.order, nil)
	var index [][256]int
	var undefined []string
	for _, m := range mapNames {
		var row [256]int
		for op := 0; op < 256; op++ {
			cands := append(append([]*line(nil), byMapOp[m][op]...), defaults[m]...)
			if len(cands) == 0 {
				if m == "0f" {
					undefined = append(undefined, fmt.Sprintf("%02X", op))
				}
				continue
			}
			// ModRM presence must agree across the candidates of one prefix.
			var perPrefix []*node
			for p := 0; p < 4; p++ {
				modrm, decided := false, false
				reach := map[*line]bool{}
				for v := 0; v < 256; v++ {
					if l := choose(cands, p, v); l != nil {
						reach[l] = true
					}
				}
				for l := range reach {
					hm := l.hasModRM() || l.specificity() > 0
					if decided && hm != modrm {
						return nil, fmt.Errorf("line %d: map %s opcode %02X: ModRM presence differs between forms", l.lineno, m, op)
					}
					modrm, decided = hm, true
				}
				n := buildModRM(cands, p, modrm)
				if n != nil && n.kind == "" && modrm && !n.leaf.hasModRM() {
					// A leaf reached through a ModRM-bearing opcode: keep the
					// ModRM byte even when its operands do not name it.
					n = &node{kind: "withModRM", children: []*node{n}}
				}
				perPrefix = append(perPrefix, n)
			}
			var root *node
			if same(perPrefix) {
				root = perPrefix[0]
			} else {
				root = &node{kind: "selPrefix", children: perPrefix}
			}
			row[op] = g.emit(root)
		}
		index = append(index, row)
	}
	_ = undefined
	return g.render(index)
}

func (l *line) hasModRM() bool {
	return hasModRMOperand(l.ops) || l.attrs["modrm"] != "" || hasAttr(l, "modrm") || hasAttr(l, "mem")
}

func hasAttr(l *line, k string) bool { _, ok := l.attrs[k]; return ok }

// emit returns the id of a node: leaves are positive ids into x86Entries,
// selector nodes are encoded as entries too (with a selector kind).
func (g *gen) emit(n *node) int {
	if n == nil {
		return 0
	}
	if n.kind == "" {
		if id, ok := g.leaves[n.leaf]; ok {
			return id
		}
		g.order = append(g.order, n.leaf)
		id := len(g.order) - 1
		g.leaves[n.leaf] = id
		g.nodes = append(g.nodes, "")
		return id
	}
	k := n.key()
	if id, ok := g.nodeID[k]; ok {
		return id
	}
	var kids []int
	for _, c := range n.children {
		kids = append(kids, g.emit(c))
	}
	base := len(g.sels)
	g.sels = append(g.sels, kids...)
	g.order = append(g.order, nil)
	id := len(g.order) - 1
	for len(g.nodes) < id {
		g.nodes = append(g.nodes, "")
	}
	g.nodes = append(g.nodes, fmt.Sprintf("{sel: %s, child: %d}", n.kind, base))
	g.nodeID[k] = id
	return id
}

var branchKinds = map[string]string{
	"jmp": "BranchJmp", "jcc": "BranchJcc", "call": "BranchCall",
	"jmp-indirect": "BranchJmpIndirect", "call-indirect": "BranchCallIndirect",
	"ret": "BranchRet", "ret-imm": "BranchRetImm", "loop": "BranchLoop",
	"xbegin": "BranchXbegin", "far-jmp": "BranchFarJmp", "far-call": "BranchFarCall",
	"far-ret": "BranchFarRet", "syscall": "BranchSyscall", "int": "BranchInt",
	"iret": "BranchIret",
}

// lockable lists the mnemonics that accept a LOCK prefix (with a memory
// destination).
var lockable = map[string]bool{
	"add": true, "adc": true, "and": true, "btc": true, "btr": true, "bts": true,
	"cmpxchg": true, "cmpxchg8b": true, "dec": true, "inc": true, "neg": true,
	"not": true, "or": true, "sbb": true, "sub": true, "xadd": true, "xchg": true,
	"xor": true,
}

var knownAttrs = map[string]bool{
	"i64": true, "d64": true, "f64": true, "br": true, "str": true, "vsib": true,
	"norex2": true, "amd": true, "modrm": true, "mem": true, "regform": true,
}

func (g *gen) leafLiteral(l *line) (string, error) {
	var flags []string
	for k := range l.attrs {
		if !knownAttrs[k] {
			return "", fmt.Errorf("line %d: unknown attribute @%s", l.lineno, k)
		}
	}
	if l.invalid {
		flags = append(flags, "fInvalid")
	}
	if l.isDef {
		flags = append(flags, "fDefault")
	}
	if l.prefix == 1 {
		flags = append(flags, "fMand66")
	}
	if lockable[l.mnem] && l.map_ != "vex1" && !strings.HasPrefix(l.map_, "evex") && !strings.HasPrefix(l.map_, "vex") {
		flags = append(flags, "fLockable")
	}
	if l.hasModRM() {
		flags = append(flags, "fModRM")
	}
	for _, a := range []struct{ attr, flag string }{
		{"i64", "fInvalid"}, {"d64", "fD64"}, {"f64", "fF64"}, {"str", "fString"},
		{"vsib", "fVSIB"}, {"norex2", "fNoREX2"}, {"amd", "fAMD"}, {"mem", "fMemOnly"},
		{"regform", "fRegForm"},
	} {
		if hasAttr(l, a.attr) && !(a.flag == "fInvalid" && l.invalid) {
			flags = append(flags, a.flag)
		}
	}
	br := "BranchNone"
	if v, ok := l.attrs["br"]; ok {
		b, ok := branchKinds[v]
		if !ok {
			return "", fmt.Errorf("line %d: unknown branch kind %q", l.lineno, v)
		}
		br = b
	}
	imm := []string{"immNone", "immNone"}
	ni := 0
	for _, o := range l.ops {
		switch o.kind {
		case "opImm", "opRel", "opIs4":
			if ni == 2 {
				return "", fmt.Errorf("line %d: more than two immediates", l.lineno)
			}
			kind := "imm" + strings.ToUpper(o.size)
			if o.kind == "opRel" {
				kind = "immRel" + strings.ToUpper(o.size)
			}
			if o.kind == "opIs4" {
				kind = "immB"
			}
			imm[ni] = kind
			ni++
		case "opO":
			imm[ni] = "immMoffs"
			ni++
		}
	}
	srcR, srcW, srcB, impR, impW := l.sources()
	return fmt.Sprintf("{flags: %s, imm: [2]uint8{%s, %s}, branch: %s, srcR: %#x, srcW: %#x, srcByte: %#x, impR: %#x, impW: %#x, mnem: %q}",
		orZero(flags), imm[0], imm[1], br, srcR, srcW, srcB, impR, impW, l.mnem), nil
}

// Register sources, as bits of the srcR, srcW and srcByte masks of an
// entry; render writes them into package decode's tables.
const (
	srcReg  = 1 << iota // ModRM.reg
	srcRM               // ModRM.rm when mod == 3
	srcVVVV             // VEX/EVEX/XOP vvvv
	srcZ                // the opcode's low three bits
	srcMem              // base and index of the memory operand (read)
)

// sources folds the operands into masks: which register fields are read,
// written, and name byte registers; string operands and fixed registers go
// into the implicit masks.
func (l *line) sources() (r, w, byt uint8, impR, impW uint32) {
	impR, impW = l.impR, l.impW
	for _, o := range l.ops {
		var src uint8
		switch o.kind {
		case "opE", "opR":
			src = srcRM
			r |= srcMem
		case "opM", "opVRM":
			r |= srcMem
			continue
		case "opG":
			src = srcReg
		case "opB":
			src = srcVVVV
		case "opZ":
			src = srcZ
		case "opX":
			impR |= 1 << 6
			impW |= 1 << 6
			continue
		case "opY":
			impR |= 1 << 7
			impW |= 1 << 7
			continue
		case "opFixed":
			bit := uint32(1) << o.fixed
			switch o.access {
			case 'r':
				impR |= bit
			case 'w':
				impW |= bit
			case '+':
				impR |= bit
				impW |= bit
			}
			continue
		default:
			continue
		}
		switch o.access {
		case 'r':
			r |= src
		case 'w':
			w |= src
		case '+':
			r |= src
			w |= src
		}
		if o.size == "b" {
			byt |= src
		}
	}
	return
}

func orZero(f []string) string {
	if len(f) == 0 {
		return "0"
	}
	sort.Strings(f)
	return strings.Join(f, " | ")
}

func (g *gen) render(index [][256]int) ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("// Code generated by x86gen from x86map.txt; DO NOT EDIT.\n\npackage decode\n\n")
	fmt.Fprintf(&b, `// Register sources of an entry's srcR/srcW/srcByte masks.
const (
	srcReg = %#x // ModRM.reg
	srcRM = %#x // ModRM.rm when mod == 3
	srcVVVV = %#x // VEX/EVEX/XOP vvvv
	srcZ = %#x // the opcode's low three bits
	srcMem = %#x // base and index of the memory operand (read)
)

`, srcReg, srcRM, srcVVVV, srcZ, srcMem)
	b.WriteString("// x86Entries holds the leaves (instruction forms) and selector nodes of\n// the opcode decision trees; entry 0 means \"no such opcode\".\n")
	b.WriteString("var x86Entries = [...]x86Entry{\n\t{},\n")
	for id := 1; id < len(g.order); id++ {
		if l := g.order[id]; l != nil {
			lit, err := g.leafLiteral(l)
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(&b, "\t%s, // %d: %s line %d\n", lit, id, l.map_, l.lineno)
			continue
		}
		fmt.Fprintf(&b, "\t%s,\n", g.nodes[id])
	}
	b.WriteString("}\n\n// x86Forms holds each leaf's operands as written in x86map.txt, for the\n// decoder's own rendering; selector nodes have none.\nvar x86Forms = [...]string{\n\t\"\",\n")
	for id := 1; id < len(g.order); id++ {
		form := ""
		if l := g.order[id]; l != nil {
			var ops []string
			for _, o := range l.ops {
				ops = append(ops, o.text)
			}
			form = strings.Join(ops, ",")
		}
		fmt.Fprintf(&b, "\t%q,\n", form)
	}
	b.WriteString("}\n\n// x86Children holds the children of selector nodes.\nvar x86Children = [...]uint16{")
	for i, c := range g.sels {
		if i%16 == 0 {
			b.WriteString("\n\t")
		}
		fmt.Fprintf(&b, "%d, ", c)
	}
	b.WriteString("\n}\n\n")
	b.WriteString("// x86Index maps (table, opcode) to the root entry of its decision tree.\n")
	fmt.Fprintf(&b, "var x86Index = [%d][256]uint16{\n", len(index))
	for i, row := range index {
		fmt.Fprintf(&b, "\t{ // %s", mapNames[i])
		for op, v := range row {
			if op%16 == 0 {
				b.WriteString("\n\t\t")
			}
			fmt.Fprintf(&b, "%d, ", v)
		}
		b.WriteString("\n\t},\n")
	}
	b.WriteString("}\n\nconst (\n")
	for i, n := range mapNames {
		fmt.Fprintf(&b, "\ttbl%s = %d\n", strings.ToUpper(n[:1])+n[1:], i)
	}
	b.WriteString(")\n")
	if len(g.order) > 65535 {
		return nil, fmt.Errorf("too many entries")
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("format generated code: %w", err)
	}
	return out, nil
}
