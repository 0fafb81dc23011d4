package plan_test

import (
	"fmt"

	"github.com/probeopt/probeopt/decode"
	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/plan"
)

// exampleFunc is a small x86-64 function at exampleAddr.
var exampleFunc = []byte{
	0x55,             // +0  push %rbp
	0x48, 0x89, 0xe5, // +1  mov %rsp,%rbp
	0x0f, 0x1f, 0x44, 0x00, 0x00, // +4  nopl 0x0(%rax,%rax,1): a nop5
	0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // +9  mov 0x10(%rip),%rax
	0xf0, 0x48, 0x0f, 0xb1, 0x0e, // +16 lock cmpxchg %rcx,(%rsi)
	0x5d, // +21 pop %rbp
	0xc3, // +22 ret
}

const exampleAddr = 0x401000

// Predict what Linux uprobes do with each instruction of a function: the
// strategy and the stable reason code.
func ExampleDecide() {
	an := plan.AnalyzeX86(exampleAddr, exampleFunc, decode.X86Decoder{})
	for _, off := range []int{0, 4, 9, 16} {
		site := &plan.Site{Arch: decode.X86_64, Addr: exampleAddr + uint64(off), Code: exampleFunc[off:], Func: an}
		d := plan.Decide(plan.LinuxUprobes, site, nil)
		fmt.Printf("+%-2d %-14s %s\n", off, d.Strategy, d.Reason)
	}
	// Output:
	// +0  emulate        emulated-push
	// +4  trampoline-nop nop5-optimized
	// +9  xol            xol-riprel
	// +16 reject         prefix-lock
}

// An address inside an instruction: the kernel would accept it and corrupt
// the instruction; probeopt decodes the function from its start and refuses.
func ExampleDecide_boundary() {
	an := plan.AnalyzeX86(exampleAddr, exampleFunc, decode.X86Decoder{})
	site := &plan.Site{Arch: decode.X86_64, Addr: exampleAddr + 17, Code: exampleFunc[17:], Func: an}
	for _, p := range plan.Policies() {
		d := plan.Decide(p, site, nil)
		fmt.Printf("%s: %s (%s)\n", p, d.Strategy, d.Reason)
	}
	d := plan.Decide(plan.Probeopt, site, nil)
	fmt.Println(d.Detail)
	// Output:
	// linux-uprobes: xol (xol)
	// probeopt: reject (mid-instruction)
	// the address is inside the instruction that starts at 0x401010 (decoding from the function start at 0x401000)
}

// Ask for the rules behind one decision, as probeopt explain prints them.
func ExampleDecide_rules() {
	code := []byte{0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00} // mov 0x10(%rip),%rax
	site := &plan.Site{Arch: decode.X86_64, Addr: 0x401000, Code: code}
	d := plan.Decide(plan.LinuxUprobes, site, &plan.Options{Rules: true})
	fmt.Println(d.Strategy, d.Reason)
	fmt.Println(d.Detail)
	for _, r := range d.Rules {
		fmt.Printf("  %-13s %-4s %s\n", r.Name, r.Outcome, r.Detail)
	}
	// Output:
	// xol xol-riprel
	// single-stepped out of line with its RIP-relative operand addressed through %rsi (two traps per hit, about 12 times an emulated hit)
	//   decode        pass 7 bytes: 48 8b 05 10 00 00 00
	//   opcode        info the kernel sees opcode 8b (1 opcode byte, legacy encoding)
	//   prefix        pass no LOCK, CS, DS, ES or SS prefix
	//   opcode-table  pass opcode byte 8b is in the table
	//   branch        info not a NOP or branch Linux emulates
	//   xol           pass single-stepped out of line; fixup: ip
	//   riprel        pass RIP-relative operand: rewritten through %rsi
}

// From a file on disk to a decision: open it with elfscan, name the sites
// with a spec, and let a File sweep the functions and index the file's
// branches (once, for every site). The fallback is what a tracer does
// when it cannot place a site's trampoline.
func ExampleFile() {
	f, err := elfscan.Open("../testdata/x86_64/usdt-nopie")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	pf := plan.NewFile(f, nil)
	for _, spec := range []string{"main", "usdt:demo:loop", "register_tm_clones"} {
		sp, err := elfscan.ParseSpec(spec)
		if err != nil {
			fmt.Println(err)
			return
		}
		sites, err := f.Resolve(sp)
		if err != nil {
			fmt.Println(err)
			return
		}
		d, err := pf.Decide(plan.Probeopt, &sites[0], &plan.Options{Live: true, Fallback: true})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%-18s %#x %s", spec, sites[0].Addr, d.Strategy)
		if d.Fallback != nil {
			fmt.Printf(", else %s", d.Fallback.Strategy)
		}
		fmt.Println()
	}
	// Output:
	// main               0x401050 trampoline-detour, else emulate
	// usdt:demo:loop     0x4010c0 trampoline-detour, else emulate
	// register_tm_clones 0x401160 emulate
}
