package elfscan_test

import (
	"errors"
	"testing"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// FuzzNewFile parses arbitrary bytes as an ELF file and walks everything
// the package reads from one. Invariants: no panic; an error is one of the
// package's typed errors; a file that opens answers every question without
// panicking, and its functions are sorted with End >= Addr.
//
// Its seeds are in testdata/fuzz/FuzzNewFile, so that it needs no file
// outside the package's testdata: small ones keep the fuzzer fast, among
// them the kilobyte-sized fixtures with functions and a USDT note, their
// first halves and their ELF headers (TestFuzzNewFileSeeds keeps those in
// step with the fixtures).
func FuzzNewFile(f *testing.F) {
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := elfscan.NewFile(data)
		if err != nil {
			checkTyped(t, err)
			return
		}
		funcs, err := file.Funcs()
		if err != nil && !errors.Is(err, elfscan.ErrNoFunctions) {
			checkTyped(t, err)
		}
		for i := range funcs {
			if funcs[i].End < funcs[i].Addr || i > 0 && funcs[i].Addr <= funcs[i-1].Addr {
				t.Fatalf("function %d: %+v", i, funcs[i])
			}
			file.FuncAt(funcs[i].Addr)
			file.Code(funcs[i].Addr, 16)
		}
		probes, err := file.USDT()
		if err != nil {
			checkTyped(t, err)
		}
		for _, p := range probes {
			file.TextOffset(p.Addr)
		}
		rs, err := file.GoResumePoints()
		if err != nil {
			checkTyped(t, err)
		}
		for i := range rs {
			if rs[i].Hi <= rs[i].Lo || i > 0 && rs[i].Lo < rs[i-1].Hi {
				t.Fatalf("resume range %d: %+v after %+v", i, rs[i], rs[max(i-1, 0)])
			}
		}
		file.EntrySites()
		if sp, err := elfscan.ParseSpec("*"); err == nil {
			file.Resolve(sp)
		}
		file.Kind()
		file.Close()
	})
}

// checkTyped fails unless err is one of the package's typed errors.
func checkTyped(t *testing.T, err error) {
	t.Helper()
	var fe *elfscan.FormatError
	var ue *elfscan.UnsupportedError
	if errors.Is(err, elfscan.ErrNotELF) || errors.As(err, &fe) || errors.As(err, &ue) {
		return
	}
	t.Fatalf("untyped error %T: %v", err, err)
}

// FuzzUSDTNotes parses arbitrary bytes as a .note.stapsdt section.
func FuzzUSDTNotes(f *testing.F) {
	f.Add([]byte("\x08\x00\x00\x00\x1e\x00\x00\x00\x03\x00\x00\x00stapsdt\x00" +
		"\x01\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00p\x00n\x00\x00\x00\x00"))
	f.Add([]byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		probes, err := elfscan.ParseUSDTNotes(data, 0)
		if err != nil {
			var fe *elfscan.FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("untyped error %T: %v", err, err)
			}
			return
		}
		for _, p := range probes {
			if p.Provider == "" || p.Name == "" {
				t.Fatalf("probe without provider or name: %+v", p)
			}
		}
	})
}

// FuzzParseUSDTArgs parses arbitrary argument strings for both
// architectures: no panic, an error wraps ErrBadSpec, a result has one
// argument per space-separated part outside brackets.
func FuzzParseUSDTArgs(f *testing.F) {
	for _, s := range []string{"-4@%edi 8@-16(%rbp)", "-4@(%rdx,%rsi,4)", "-8@counter(%rip)", "-4@[sp, 128]", "4@#3", "8@%fs:0x28", "-4@40+CheckpointStats(%rip)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, arch := range []decode.Arch{decode.X86_64, decode.ARM64} {
			args, err := elfscan.ParseUSDTArgs(arch, s)
			if err != nil {
				if !errors.Is(err, elfscan.ErrBadSpec) {
					t.Fatalf("untyped error: %v", err)
				}
				continue
			}
			for _, a := range args {
				if a.Kind == 0 || a.Size != 0 && a.Size != 1 && a.Size != 2 && a.Size != 4 && a.Size != 8 {
					t.Fatalf("%q: argument %+v", s, a)
				}
			}
		}
	})
}

// FuzzParseSpec parses arbitrary probe specs: no panic, an error wraps
// ErrBadSpec, a result has a kind.
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"main", "parse+0x10", "0x401000", "usdt:postgresql:*", "uprobe:/bin/bash:readline", "usdt:/usr/bin/python3:python:line"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sp, err := elfscan.ParseSpec(s)
		if err != nil {
			if !errors.Is(err, elfscan.ErrBadSpec) {
				t.Fatalf("untyped error: %v", err)
			}
			return
		}
		if sp.Kind == 0 || sp.Text != s {
			t.Fatalf("%q: %+v", s, sp)
		}
	})
}
