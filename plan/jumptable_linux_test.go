//go:build linux

package plan_test

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/probeopt/probeopt/elfscan"
	"github.com/probeopt/probeopt/internal/fixture"
	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
	"github.com/probeopt/probeopt/proc"
	"github.com/probeopt/probeopt/trampoline"
)

// switchFuncs are the functions of testdata/jumptab/switches.c with a
// switch compiled to a jump table.
var switchFuncs = []string{"dense", "offset", "sparse", "bytes", "run", "two"}

// switchBuilds are the builds of switches.c the recovery is checked on.
func switchBuilds() []fixture.Program {
	var out []fixture.Program
	for _, cc := range []string{"gcc", "clang"} {
		for _, opt := range []string{"-O2", "-Os"} {
			for _, pic := range [][]string{{"-fPIE", "-pie"}, {"-fno-pie", "-no-pie"}} {
				flags := append([]string{opt, "-Wall"}, pic...)
				name := fmt.Sprintf("switches-%s%s%s", cc, opt, pic[0])
				out = append(out, fixture.Program{Compiler: cc, Flags: flags, Dir: "jumptab", Files: []string{"switches.c"}, Name: name})
			}
		}
	}
	// With CET: the jumps are notrack.
	out = append(out, fixture.Program{Compiler: "gcc", Flags: []string{"-O2", "-Wall", "-fcf-protection=full", "-fPIE", "-pie"}, Dir: "jumptab", Files: []string{"switches.c"}, Name: "switches-gcc-cet"})
	return out
}

// TestJumpTablesAgainstCPU recovers the jump tables of every switch of the
// fixture, built by gcc and clang at -O2 and -Os, PIE and not, and checks
// them against the CPU: each indirect jump of those functions gets a
// breakpoint; at each hit the jump is single-stepped under ptrace and the
// address the CPU went to recorded. The program passes every value of each
// switch's range (the gaps too), so the targets the CPU took must be
// exactly the recovered table's targets: none missed, none extra.
func TestJumpTablesAgainstCPU(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the fixture is built for the host and the recovery is x86-64's; this is %s", runtime.GOARCH)
	}
	testenv.NeedPtrace(t)
	for _, p := range switchBuilds() {
		t.Run(p.Name, func(t *testing.T) {
			path := fixture.Build(t, p)
			jumps := recoverSwitches(t, path)
			got := cpuJumpTargets(t, path, jumps)
			for _, j := range slices.Sorted(mapKeys(jumps)) {
				jt := jumps[j]
				if !slices.Equal(got[j], jt.Targets) {
					t.Errorf("jmp at %#x (%s): the CPU went to %x, the table at %#x (%d entries) has %x", j, jt.fn, got[j], jt.Table, jt.Entries, jt.Targets)
				}
			}
			checkDetours(t, path, got)
		})
	}
}

// checkDetours decides every instruction of the switch functions and
// checks that no detour the plan allows replaces bytes that a jump the CPU
// took lands strictly inside; and that the functions do get detours.
func checkDetours(t *testing.T, path string, cpu map[uint64][]uint64) {
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var landed []uint64
	for _, ts := range cpu {
		landed = append(landed, ts...)
	}
	slices.Sort(landed)
	pf := plan.NewFile(f, nil)
	funcs, _ := f.Funcs()
	detours, refused := 0, 0
	for i := range funcs {
		if !slices.Contains(switchFuncs, funcs[i].Name) {
			continue
		}
		fn := pf.Function(&funcs[i])
		for a := range fn.Starts() {
			d, err := pf.Decide(plan.Probeopt, &elfscan.Site{Addr: a, Func: &funcs[i]}, &plan.Options{Rules: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Strategy != plan.TrampolineDetour {
				for _, r := range d.Rules {
					if r.Name == "trampoline" && r.Outcome == plan.Fail && strings.Contains(r.Detail, "jump table") {
						refused++
					}
				}
				continue
			}
			detours++
			ts, err := trampoline.AnalyzeX86(a, fn.Code[a-fn.Addr:], nil)
			if err != nil {
				t.Fatalf("%#x: a detour the trampoline refuses: %v", a, err)
			}
			j, _ := slices.BinarySearch(landed, a+1)
			if j < len(landed) && landed[j] < ts.Resume() {
				t.Errorf("%s: a detour at %#x replaces %#x-%#x, and the CPU jumped to %#x through a jump table", funcs[i].Name, a, ts.PatchAddr, ts.Resume(), landed[j])
			}
			if last := d.Rules[len(d.Rules)-1]; fn.IndirectJumps > 0 && !strings.Contains(last.Detail, "jump tables, recovered") {
				t.Errorf("%s: detour rule %q does not say its tables were recovered", funcs[i].Name, last.Detail)
			}
		}
	}
	t.Logf("%d detours, %d refused by a table target inside", detours, refused)
	if detours == 0 || refused == 0 {
		t.Errorf("%d detours and %d refusals for a table target: the check saw nothing to check", detours, refused)
	}
}

type namedTable struct {
	plan.JumpTable
	fn string
}

// recoverSwitches returns the recovered tables of the switch functions by
// the address of their jumps (link-time addresses); every indirect jump of
// those functions must be recovered.
func recoverSwitches(t *testing.T, path string) map[uint64]namedTable {
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	funcs, err := f.Funcs()
	if err != nil {
		t.Fatal(err)
	}
	pf := plan.NewFile(f, nil)
	out := map[uint64]namedTable{}
	for _, name := range switchFuncs {
		i := slices.IndexFunc(funcs, func(fn elfscan.Func) bool { return fn.Name == name })
		if i < 0 {
			t.Fatalf("no function %s", name)
		}
		fn := pf.Function(&funcs[i])
		if fn.IndirectJumps == 0 {
			t.Errorf("%s: no indirect jump: the compiler made no jump table", name)
		}
		for _, u := range fn.UnresolvedJumps() {
			t.Errorf("%s: the jmp at %#x is not recovered: %s", name, u.Addr, u.Why)
		}
		for _, jt := range fn.JumpTables() {
			out[jt.Jump] = namedTable{jt, name}
		}
	}
	return out
}

// cpuJumpTargets runs the program under ptrace with a breakpoint at each
// jump and returns, for each, the sorted distinct addresses the CPU went
// to when it stepped the jump (link-time addresses).
func cpuJumpTargets(t *testing.T, path string, jumps map[uint64]namedTable) map[uint64][]uint64 {
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Spawn([]string{path}, &proc.SpawnOptions{Stdout: out})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	maps, err := p.Maps()
	if err != nil {
		t.Fatal(err)
	}
	base := uint64(0)
	for _, m := range maps {
		if elfscan.SamePath(m.Path, path) && m.Offset == 0 {
			base = m.Start
			break
		}
	}
	f, err := elfscan.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Kind() == "executable" {
		base = 0
	}
	orig := map[uint64]byte{}
	for j := range jumps {
		b := []byte{0}
		if err := p.ReadMemory(base+j, b); err != nil {
			t.Fatal(err)
		}
		orig[base+j] = b[0]
		if err := p.WriteMemory(base+j, []byte{0xcc}); err != nil {
			t.Fatal(err)
		}
	}
	type hit struct {
		tid  int
		addr uint64
	}
	hits := make(chan hit, 1)
	if _, err := p.SetTrapHandler(func(ctx *proc.TrapContext) proc.TrapAction {
		if _, ok := orig[ctx.Addr]; !ok {
			return proc.TrapPass
		}
		hits <- hit{ctx.Tid, ctx.Addr}
		return proc.TrapHold
	}); err != nil {
		t.Fatal(err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]map[uint64]bool{}
	deadline := time.After(60 * time.Second)
	for done := false; !done; {
		select {
		case h := <-hits:
			var to uint64
			if _, err := p.Stopped(func(w *proc.World) error {
				if err := w.WriteMemory(h.addr, []byte{orig[h.addr]}); err != nil {
					return err
				}
				r, err := w.Regs(h.tid)
				if err != nil {
					return err
				}
				r.SetPC(h.addr)
				if err := w.SetRegs(h.tid, &r); err != nil {
					return err
				}
				if err := w.Step(h.tid, 0); err != nil {
					return err
				}
				if r, err = w.Regs(h.tid); err != nil {
					return err
				}
				to = r.PC()
				return w.WriteMemory(h.addr, []byte{0xcc})
			}); err != nil {
				t.Fatalf("step the jmp at %#x: %v", h.addr, err)
			}
			if seen[h.addr-base] == nil {
				seen[h.addr-base] = map[uint64]bool{}
			}
			seen[h.addr-base][to-base] = true
			if err := p.Release(nil); err != nil {
				t.Fatal(err)
			}
		case <-p.Exited():
			done = true
		case <-deadline:
			t.Fatal("the program did not finish in 60 s")
		}
	}
	if st, err := p.Wait(); err != nil || st.Code != 0 {
		t.Fatalf("exit %+v %v", st, err)
	}
	// It ran to the end with the sums it prints untraced.
	b, err := os.ReadFile(out.Name())
	want, werr := exec.Command(path).Output()
	if err != nil || werr != nil || string(b) != string(want) {
		t.Errorf("output %q (%v), untraced %q (%v)", b, err, want, werr)
	}
	res := map[uint64][]uint64{}
	for j, ts := range seen {
		res[j] = slices.Sorted(mapKeys(ts))
	}
	return res
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
