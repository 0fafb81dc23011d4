package qemu

import "github.com/probeopt/probeopt/emulate"

// ARM64SiteCase is one generated instruction at a probe site, with a
// machine state to run it from (State.PC is the site, in the main code
// window).
type ARM64SiteCase struct {
	Class string
	Word  uint32
	State emulate.ARM64State
}

// GenARM64SiteCases generates n single instructions of the given classes
// (a subset of ARM64XOLClasses), each with a state that sets the
// registers it uses the way the relocation campaign does, for tests of
// code that displaces one instruction (arm64 trampolines). The same seed
// gives the same cases.
func GenARM64SiteCases(seed uint64, n int, classes []string) []ARM64SiteCase {
	g := newA64Gen(seed, "")
	out := make([]ARM64SiteCase, 0, n)
	for i := 0; i < n && len(classes) > 0; i++ {
		cl := classes[g.r.n(len(classes))]
		from := ARM64CodeAddr + 0x2000 + 4*uint64(g.r.n(0x8000/4))
		s := g.state(from, true)
		w := g.xolWord(cl, &s, from, 0, 1)
		out = append(out, ARM64SiteCase{Class: cl, Word: w, State: s})
	}
	return out
}
