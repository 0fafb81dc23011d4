package elfscan_test

import (
	"errors"
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
)

// Open a binary and list its functions: where each starts, how long it is,
// and the file offset a uprobe would take.
func ExampleOpen() {
	f, err := elfscan.Open("../testdata/x86_64/funcs-nopie")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	fmt.Println(f.Arch, f.Kind())
	funcs, err := f.Funcs()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("functions from", f.FuncSource())
	for _, fn := range funcs {
		off, err := f.TextOffset(fn.Addr)
		if err != nil {
			continue
		}
		fmt.Printf("%#x %4d %#6x %s\n", fn.Addr, fn.End-fn.Addr, off, fn.Name)
	}
	// Output:
	// x86-64 executable
	// functions from .symtab
	// 0x401000   23 0x1000 _init
	// 0x401030   16 0x1030 printf@plt
	// 0x401040   16 0x1040 strtol@plt
	// 0x401050    3 0x1050 dispatch.cold
	// 0x401060  121 0x1060 main
	// 0x4010e0   34 0x10e0 _start
	// 0x401110    1 0x1110 _dl_relocate_static_pie
	// 0x401120   48 0x1120 deregister_tm_clones
	// 0x401150   64 0x1150 register_tm_clones
	// 0x401190   48 0x1190 __do_global_dtors_aux
	// 0x4011c0   16 0x11c0 frame_dummy
	// 0x4011d0    7 0x11d0 leaf
	// 0x4011e0   20 0x11e0 helper
	// 0x401200   35 0x1200 sum
	// 0x401230   88 0x1230 dispatch
	// 0x401288    9 0x1288 _fini
}

// List the USDT probes of a binary with their arguments and semaphores.
func ExampleFile_USDT() {
	f, err := elfscan.Open("../testdata/x86_64/usdt-pie")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	probes, err := f.USDT()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range probes {
		fmt.Printf("%s:%s at %#x %q", p.Provider, p.Name, p.Addr, p.Args)
		if p.SemaphoreAddr != 0 {
			fmt.Printf(" semaphore %#x", p.SemaphoreAddr)
		}
		fmt.Println()
	}
	// Output:
	// demo:noargs at 0x1204 ""
	// demo:one_reg at 0x1205 "-8@%rax"
	// demo:imm at 0x1206 "-4@$7 -4@$-1"
	// demo:mixed at 0x1207 "-1@%r8b -2@%cx -8@%rax"
	// demo:indexed at 0x120f "-4@(%r9) -4@(%rdx,%rsi,4)"
	// demo:global at 0x1210 "-8@counter(%rip)"
	// demo:six at 0x1211 "-8@%rax -8@%rsi -1@%r8b -2@%cx -8@counter(%rip) 8@%rdi"
	// demo:loop at 0x10cd "-8@%rsi -8@%rbx"
	// demo:sema_start at 0x122a "-4@%edi" semaphore 0x408a
	// demo:sema_done at 0x1242 "-4@%eax -4@%edi" semaphore 0x4088
}

// Resolve probe specs; a misspelt name fails with the closest names.
func ExampleFile_Resolve() {
	f, err := elfscan.Open("../testdata/x86_64/funcs-pie")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	for _, spec := range []string{"main", "main+4", "mian"} {
		sp, err := elfscan.ParseSpec(spec)
		if err != nil {
			fmt.Println(err)
			continue
		}
		sites, err := f.Resolve(sp)
		var ne *elfscan.NoSymbolError
		switch {
		case errors.As(err, &ne):
			fmt.Println(err)
			fmt.Println("suggestions:", ne.Suggestions)
		case err != nil:
			fmt.Println(err)
		default:
			for _, s := range sites {
				fmt.Printf("%s: %s site at %#x, file offset %#x, in %s\n", spec, s.Kind, s.Addr, s.Offset, s.Func.Name)
			}
		}
	}
	// Output:
	// main: entry site at 0x1070, file offset 0x1070, in main
	// main+4: inst site at 0x1074, file offset 0x1074, in main
	// "mian": no such symbol; did you mean main?
	// suggestions: [main]
}

// Parse USDT argument specifications as <sys/sdt.h> writes them.
func ExampleParseUSDTArgs() {
	args, err := elfscan.ParseUSDTArgs(decode.X86_64, "-4@%edi 8@-16(%rbp) -8@counter(%rip)")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, a := range args {
		fmt.Printf("%-18s size %d signed %-5v kind %v reg %q disp %d symbol %q\n", a.Text, a.Size, a.Signed, a.Kind, a.Reg, a.Value, a.Symbol)
	}
	// Output:
	// -4@%edi            size 4 signed true  kind reg reg "edi" disp 0 symbol ""
	// 8@-16(%rbp)        size 8 signed false kind mem reg "rbp" disp -16 symbol ""
	// -8@counter(%rip)   size 8 signed true  kind mem reg "rip" disp 0 symbol "counter"
}
