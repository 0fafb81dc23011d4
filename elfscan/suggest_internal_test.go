package elfscan

import (
	"math/rand/v2"
	"testing"
)

// osaDistance is the plain dynamic program for the optimal-string-alignment
// distance, without a limit: the reference for editDistance.
func osaDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"main", "main", 0}, {"mian", "main", 1}, {"main", "mains", 1},
		{"main", "man", 1}, {"kitten", "sitting", 3}, {"ca", "abc", 3}, {"", "abc", 3},
	} {
		if got := editDistance(tt.a, tt.b, 10); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
	// Random short strings over a small alphabet, against the reference,
	// with every limit.
	r := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		b := make([]byte, r.IntN(9))
		for i := range b {
			b[i] = "abc"[r.IntN(3)]
		}
		return string(b)
	}
	for range 20000 {
		a, b := word(), word()
		want := osaDistance(a, b)
		for limit := 0; limit <= 9; limit++ {
			if got := editDistance(a, b, limit); got != min(want, limit+1) {
				t.Fatalf("editDistance(%q, %q, %d) = %d, want %d", a, b, limit, got, min(want, limit+1))
			}
		}
	}
}

func TestEscapeGlob(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"main", "main"},
		{"llvm::Twine::str[abi:cxx11]", `llvm::Twine::str\[abi:cxx11]`},
		{"operator*", `operator\*`},
		{`a?b\c`, `a\?b\\c`},
	} {
		got := escapeGlob(tt.in)
		if got != tt.want {
			t.Errorf("escapeGlob(%q) = %q, want %q", tt.in, got, tt.want)
		}
		// The escaped name, as a pattern, matches the name and only it.
		if !match(got, tt.in) || match(got, tt.in+"x") {
			t.Errorf("pattern %q does not match exactly %q", got, tt.in)
		}
	}
}

func TestStripABITags(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"llvm::Twine::str[abi:cxx11]", "llvm::Twine::str"},
		{"f[abi:cxx11]<int>[abi:x]", "f<int>"},
		{"g[abi:", "g[abi:"},
		{"plain", "plain"},
	} {
		if got := stripABITags(tt.in); got != tt.want {
			t.Errorf("stripABITags(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// FuzzEditDistance compares the bounded edit distance with the reference
// on arbitrary strings.
func FuzzEditDistance(f *testing.F) {
	f.Add("mian", "main", uint8(1))
	f.Add("kitten", "sitting", uint8(2))
	f.Add("", "abc", uint8(0))
	f.Fuzz(func(t *testing.T, a, b string, limit uint8) {
		if len(a) > 64 || len(b) > 64 {
			return
		}
		l := int(limit % 16)
		want := min(osaDistance(a, b), l+1)
		if got := editDistance(a, b, l); got != want {
			t.Fatalf("editDistance(%q, %q, %d) = %d, want %d", a, b, l, got, want)
		}
		if editDistance(b, a, l) != want {
			t.Fatalf("not symmetric for %q, %q", a, b)
		}
	})
}
