//go:build linux && amd64

package probe_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/probeopt/probeopt/internal/testenv"
	"github.com/probeopt/probeopt/plan"
)

// coldAsm has foo, whose cold part foo.cold (a local function in
// .text.unlikely, as GCC emits it) jumps back to foo+4, inside the six
// bytes a detour of foo's entry would replace, and bar, which nothing
// jumps into.
const coldAsm = `
	.text
	.globl	foo
	.type	foo, @function
foo:
	push	%rbp			# foo+0
	mov	%rsp, %rbp		# foo+1
.Lfoo_body:
	mov	%edi, %eax		# foo+4: foo.cold jumps here
	test	%eax, %eax
	js	foo.cold
	add	$1, %eax
	pop	%rbp
	ret
	.size	foo, .-foo

	.globl	bar
	.type	bar, @function
bar:
	push	%rbp
	mov	%rsp, %rbp
	mov	%edi, %eax
	add	$2, %eax
	pop	%rbp
	ret
	.size	bar, .-bar

	.section .text.unlikely,"ax",@progbits
	.type	foo.cold, @function
foo.cold:
	neg	%edi
	jmp	.Lfoo_body
	.size	foo.cold, .-foo.cold

	.section .note.GNU-stack,"",@progbits
`

const coldMain = `
#include <stdio.h>
int foo(int);
int bar(int);
int main(void) {
	int s = 0;
	for (int i = -3; i < 3; i++)
		s = s * 7 + foo(i) * 3 + bar(i);
	printf("%d\n", s);
	return 0;
}
`

// TestForeignBranchNoDetour traces a program whose foo is entered, besides
// its entry, by a jump from its cold part to foo+4: the engine must not
// give foo's entry a detour (the jump would land inside the jump to the
// slot), while bar, which nothing jumps into, takes one. Every call of foo
// with a negative argument takes the jump, so a wrong detour crashes the
// program or changes its output.
func TestForeignBranchNoDetour(t *testing.T) {
	needPtrace(t)
	gcc := testenv.MustHaveTool(t, "gcc")
	dir := t.TempDir()
	for name, text := range map[string]string{"cold.S": coldAsm, "main.c": coldMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	exe := filepath.Join(dir, "cold")
	if b, err := exec.Command(gcc, "-O2", "-fPIE", "-pie", "-o", exe, filepath.Join(dir, "main.c"), filepath.Join(dir, "cold.S")).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, b)
	}
	argv := []string{exe}
	want := untraced(t, argv, nil)
	r := spawn(t, argv, nil, nil)
	for _, spec := range []string{"foo", "bar"} {
		if _, err := r.tr.Add(spec); err != nil {
			t.Fatalf("add %s: %v", spec, err)
		}
	}
	r.finish(t, time.Minute)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("output differs:\ntraced   %q\nuntraced %q", r.stdout, want)
	}
	st := r.tr.Stats()
	seen := map[string]bool{}
	for _, p := range st.Probes {
		for _, s := range p.Sites {
			seen[s.Symbol] = true
			switch s.Symbol {
			case "foo":
				if s.Strategy == plan.TrampolineDetour || s.Strategy == plan.TrampolineNop {
					t.Errorf("foo: %s (%s): a jump from foo.cold lands inside the replaced bytes", s.Strategy, s.Detail)
				}
			case "bar":
				if s.Strategy != plan.TrampolineDetour {
					t.Errorf("bar: %s (%s), want a detour", s.Strategy, s.Detail)
				}
			}
			if s.Hits != 6 {
				t.Errorf("%s: %d hits, want 6", s.Symbol, s.Hits)
			}
		}
	}
	if !seen["foo"] || !seen["bar"] {
		t.Errorf("sites %v, want foo and bar", seen)
	}
}
