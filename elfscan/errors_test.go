package elfscan_test

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
)

func readFixture(t *testing.T, arch, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(fixture.Path(t, arch, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// patched returns a copy of b with a little-endian value written at off.
func patched(b []byte, off int, size int, v uint64) []byte {
	c := append([]byte(nil), b...)
	switch size {
	case 2:
		binary.LittleEndian.PutUint16(c[off:], uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(c[off:], uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(c[off:], v)
	}
	return c
}

// TestBadInput checks that every kind of unusable input gets its typed
// error, from NewFile and from Open, and that nothing panics.
func TestBadInput(t *testing.T) {
	good := readFixture(t, "x86_64", "funcs-pie")
	le := binary.LittleEndian
	shoff := le.Uint64(good[0x28:])
	tests := []struct {
		name    string
		data    []byte
		want    error
		format  bool // want a *FormatError
		machine elf.Machine
	}{
		{"empty", nil, elfscan.ErrNotELF, false, 0},
		{"script", []byte("#!/bin/sh\necho hi\n"), elfscan.ErrNotELF, false, 0},
		{"magic-only", []byte("\x7fELF"), elfscan.ErrTruncated, true, 0},
		{"elf32", fixture.ELFHeader(elf.ELFCLASS32, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_386), elfscan.ErrUnsupported, false, 0},
		{"big-endian", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2MSB, elf.ET_EXEC, elf.EM_PPC64), elfscan.ErrUnsupported, false, 0},
		{"bad-class", fixture.ELFHeader(7, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_X86_64), nil, true, 0},
		{"bad-byte-order", fixture.ELFHeader(elf.ELFCLASS64, 9, elf.ET_EXEC, elf.EM_X86_64), nil, true, 0},
		{"riscv", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_RISCV), elfscan.ErrUnsupported, false, elf.EM_RISCV},
		{"relocatable", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_REL, elf.EM_X86_64), elfscan.ErrUnsupported, false, 0},
		{"core", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_CORE, elf.EM_X86_64), elfscan.ErrUnsupported, false, 0},
		{"header-cut", fixture.ELFHeader(elf.ELFCLASS64, elf.ELFDATA2LSB, elf.ET_EXEC, elf.EM_X86_64)[:40], elfscan.ErrTruncated, true, 0},
		{"truncated", good[:4096], elfscan.ErrTruncated, true, 0},
		{"phdrs-past-end", patched(good, 0x20, 8, uint64(len(good))), elfscan.ErrTruncated, true, 0},
		{"phentsize", patched(good, 0x36, 2, 40), nil, true, 0},
		{"shdrs-past-end", patched(good, 0x28, 8, uint64(len(good))-10), elfscan.ErrTruncated, true, 0},
		{"shentsize", patched(good, 0x3a, 2, 40), nil, true, 0},
		{"shnum-huge", patched(good, 0x3c, 2, 0xffff), elfscan.ErrTruncated, true, 0},
		{"shstrndx", patched(good, 0x3e, 2, 0x7fff), nil, true, 0},
		{"load-past-end", patched(good, int(le.Uint64(good[0x20:]))+56*3+8, 8, 1<<40), elfscan.ErrTruncated, true, 0},
		{"section-0-count-cut", patched(patched(good, 0x3c, 2, 0), int(shoff)+32, 8, 1<<30), elfscan.ErrTruncated, true, 0},
	}
	dir := t.TempDir()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(what string, f *elfscan.File, err error) {
				if err == nil {
					f.Close()
					t.Fatalf("%s succeeded, want an error", what)
				}
				if tt.want != nil && !errors.Is(err, tt.want) {
					t.Errorf("%s: %v, want %v", what, err, tt.want)
				}
				var fe *elfscan.FormatError
				if tt.format != errors.As(err, &fe) {
					t.Errorf("%s: %v (%T): *FormatError %v, want %v", what, err, err, !tt.format, tt.format)
				}
				var ue *elfscan.UnsupportedError
				if tt.machine != 0 && (!errors.As(err, &ue) || ue.Machine != tt.machine) {
					t.Errorf("%s: %v, want an UnsupportedError for %v", what, err, tt.machine)
				}
			}
			f, err := elfscan.NewFile(tt.data)
			check("NewFile", f, err)
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, tt.data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err = elfscan.Open(p)
			check("Open", f, err)
		})
	}
	if _, err := elfscan.Open(dir); !errors.Is(err, elfscan.ErrNotELF) {
		t.Errorf("Open(directory): %v, want ErrNotELF", err)
	}
	if _, err := elfscan.Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(missing): %v, want ErrNotExist", err)
	}
}

// TestNoSections checks a file without section headers: it opens (the
// segments give the offsets) and has no functions.
func TestNoSections(t *testing.T) {
	good := readFixture(t, "x86_64", "funcs-pie")
	b := patched(patched(good, 0x28, 8, 0), 0x3c, 2, 0)
	f, err := elfscan.NewFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Funcs(); !errors.Is(err, elfscan.ErrNoFunctions) {
		t.Errorf("Funcs: %v, want ErrNoFunctions", err)
	}
	if p, err := f.USDT(); err != nil || len(p) != 0 {
		t.Errorf("USDT: %v, %v; want none", p, err)
	}
	if off, err := f.TextOffset(0x1139); err != nil || off != 0x1139 {
		t.Errorf("TextOffset: %#x, %v", off, err)
	}
}

// TestDamagedTables corrupts the symbol table, the notes and the Go
// function table of real files and checks for typed errors, not panics.
func TestDamagedTables(t *testing.T) {
	t.Run("usdt-note-size", func(t *testing.T) {
		b := readFixture(t, "x86_64", "usdt-pie")
		f, err := elfscan.NewFile(b)
		if err != nil {
			t.Fatal(err)
		}
		off := section(t, b, ".note.stapsdt").Offset
		f.Close()
		b = patched(b, int(off)+4, 4, 1<<20) // descsz past the section
		f, err = elfscan.NewFile(b)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.USDT()
		var fe *elfscan.FormatError
		if !errors.As(err, &fe) || !errors.Is(err, elfscan.ErrTruncated) {
			t.Errorf("USDT: %v, want a truncated *FormatError", err)
		}
	})
	t.Run("symtab-past-end", func(t *testing.T) {
		b := readFixture(t, "x86_64", "funcs-pie")
		var hdr uint64
		shoff := binary.LittleEndian.Uint64(b[0x28:])
		for i, s := range sections(t, b) {
			if s.Type == elf.SHT_SYMTAB {
				hdr = shoff + uint64(i)*64
			}
		}
		b = patched(b, int(hdr)+32, 8, 1<<30) // sh_size
		wantFuncsFormatError(t, b)
	})
	t.Run("gopclntab", func(t *testing.T) {
		b, err := os.ReadFile(fixture.GoProgram(t, true))
		if err != nil {
			t.Fatal(err)
		}
		pcln := section(t, b, ".gopclntab")
		for i := uint64(8); i < 64; i++ {
			b[pcln.Offset+i] = 0xff
		}
		wantFuncsFormatError(t, b)
	})
}

// wantFuncsFormatError checks that the file b opens and that Funcs fails
// with a *FormatError.
func wantFuncsFormatError(t *testing.T, b []byte) {
	t.Helper()
	f, err := elfscan.NewFile(b)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Funcs()
	var fe *elfscan.FormatError
	if !errors.As(err, &fe) {
		t.Errorf("Funcs: %v, want a *FormatError", err)
	}
}

// section returns the header of the section of b called name, or fails
// the test.
func section(t *testing.T, b []byte, name string) *elf.Section {
	t.Helper()
	for _, s := range sections(t, b) {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no %s section", name)
	return nil
}

// sections lists the section headers of b with debug/elf.
func sections(t *testing.T, b []byte) []*elf.Section {
	t.Helper()
	ef, err := elf.NewFile(bytesReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return ef.Sections
}
