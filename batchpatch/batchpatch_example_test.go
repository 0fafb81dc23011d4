package batchpatch_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/probeopt/probeopt/batchpatch"
	"github.com/probeopt/probeopt/elfscan"
)

// Put an int3 at the entry of two functions of a binary, in a patched copy:
// patch addresses are virtual addresses, translated to file offsets through
// the ELF program headers. The old bytes are checked first, as they would
// be in a live process.
func ExampleApplyFile() {
	const src = "../testdata/x86_64/funcs-pie"
	f, err := elfscan.Open(src)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	var ps []batchpatch.Patch
	for _, name := range []string{"main", "helper"} {
		sp, err := elfscan.ParseSpec(name)
		if err != nil {
			fmt.Println(err)
			return
		}
		sites, err := f.Resolve(sp)
		if err != nil {
			fmt.Println(err)
			return
		}
		old, err := f.Code(sites[0].Addr, 1)
		if err != nil {
			fmt.Println(err)
			return
		}
		ps = append(ps, batchpatch.Patch{Addr: sites[0].Addr, Old: []byte{old[0]}, New: []byte{0xcc}})
	}
	batchpatch.Sort(ps)
	offset := func(vaddr uint64) (int64, error) {
		off, err := f.Offset(vaddr)
		return int64(off), err
	}

	dir, err := os.MkdirTemp("", "batchpatch-example-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	dst := filepath.Join(dir, "funcs-pie.patched")
	if err := batchpatch.ApplyFile(src, dst, ps, &batchpatch.FileOptions{Offset: offset}); err != nil {
		fmt.Println(err)
		return
	}
	patched, err := os.ReadFile(dst)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range ps {
		off, _ := offset(p.Addr)
		fmt.Printf("%#x: %x -> %02x\n", p.Addr, p.Old, patched[off])
	}

	// Applying the same batch to the patched copy fails: its old bytes are
	// no longer there. Nothing is written.
	err = batchpatch.ApplyFile(dst, filepath.Join(dir, "twice"), ps, &batchpatch.FileOptions{Offset: offset})
	var me *batchpatch.MismatchError
	if errors.As(err, &me) {
		fmt.Printf("mismatch at %#x: want %x, found %x\n", me.Addr, me.Want, me.Got)
	}
	if _, err := os.Stat(filepath.Join(dir, "twice")); errors.Is(err, os.ErrNotExist) {
		fmt.Println("no file written")
	}
	// Output:
	// 0x1070: 53 -> cc
	// 0x11f0: 83 -> cc
	// mismatch at 0x1070: want 53, found cc
	// no file written
}
