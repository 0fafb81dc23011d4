package x86cpu

import "testing"

// TestX86GenDeterministic checks that a seed fixes the sequence.
func TestX86GenDeterministic(t *testing.T) {
	a, b := NewX86Gen(42), NewX86Gen(42)
	var x, y [MaxX86Len]byte
	for i := range 1000 {
		sa, sb := a.Structured(&x), b.Structured(&y)
		if sa != sb || x != y {
			t.Fatalf("case %d differs: %v % x, %v % x", i, sa, x, sb, y)
		}
		a.Random(&x)
		b.Random(&y)
		if x != y {
			t.Fatalf("random case %d differs", i)
		}
	}
	c := NewX86Gen(43)
	c.Random(&y)
	NewX86Gen(42).Random(&x)
	if x == y {
		t.Errorf("seeds 42 and 43 give the same first case")
	}
}

// TestX86GenShapes checks that Structured reaches every structured shape
// and that the escapes sit where the shapes say.
func TestX86GenShapes(t *testing.T) {
	g := NewX86Gen(1)
	seen := make(map[X86Shape]int)
	var c [MaxX86Len]byte
	for range 20000 {
		s := g.Structured(&c)
		seen[s]++
		i := 0
		for i < len(c) && (isLegacyPrefix(c[i]) || c[i]&0xf0 == 0x40) {
			i++
		}
		if i >= len(c)-4 {
			continue // pushed out by prefixes
		}
		want := map[X86Shape]byte{ShapeVEX2: 0xc5, ShapeVEX3: 0xc4, ShapeEVEX: 0x62, ShapeXOP: 0x8f, ShapeREX2: 0xd5,
			ShapeLegacy0F: 0x0f, ShapeLegacy0F38: 0x0f, ShapeLegacy0F3A: 0x0f, Shape3DNow: 0x0f}
		if w, ok := want[s]; ok && c[i] != w {
			t.Fatalf("%v case % x: byte %d is %02x, want %02x", s, c, i, c[i], w)
		}
	}
	for _, s := range X86Shapes() {
		if s != ShapeRandom && seen[s] == 0 {
			t.Errorf("shape %v never generated", s)
		}
	}
	if seen[ShapeRandom] != 0 {
		t.Errorf("Structured returned ShapeRandom")
	}
}
