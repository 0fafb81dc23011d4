package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonLines parses one JSON object per line.
func jsonLines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON object: %q: %v", line, err)
		}
		objs = append(objs, m)
	}
	return objs
}

// lookup follows a dotted path such as "branch.target" through nested
// objects.
func lookup(m map[string]any, path string) (any, bool) {
	var v any = m
	for _, k := range strings.Split(path, ".") {
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		if v, ok = obj[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// checkFields compares the fields of a JSON object with want; numbers are
// given as float64, as encoding/json decodes them.
func checkFields(t *testing.T, obj map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := lookup(obj, k)
		if !ok {
			t.Errorf("%v: field %q missing", obj["input"], k)
			continue
		}
		if s, isStr := w.(string); isStr && strings.HasPrefix(s, "~") {
			if gs, _ := got.(string); !strings.Contains(gs, s[1:]) {
				t.Errorf("%v: %s = %v, want it to contain %q", obj["input"], k, got, s[1:])
			}
			continue
		}
		if got != w {
			t.Errorf("%v: %s = %v (%T), want %v (%T)", obj["input"], k, got, got, w, w)
		}
	}
}

// The common fields every JSON line carries, success or not.
var commonKeys = []string{"input", "bytes", "len", "text", "arch", "addr", "trailing"}

// TestDecodeX86JSON decodes instructions whose fields are known from the
// Intel and AMD manuals and agree with objdump -d.
func TestDecodeX86JSON(t *testing.T) {
	needX86Decoder(t)
	tests := []struct {
		args []string
		want map[string]any
	}{
		{[]string{"f30f1efa"}, map[string]any{
			"len": 4.0, "bytes": "f30f1efa", "text": "~endbr64", "mnemonic": "endbr64",
			"encoding": "legacy", "map": "0f", "opcode": "1e", "mandatory_prefix": "f3",
			"modrm.byte": "fa", "modrm.mod": 3.0, "modrm.reg": 7.0, "modrm.rm": 2.0,
		}},
		{[]string{"0f1f440000"}, map[string]any{
			"len": 5.0, "text": "~nop", "map": "0f", "opcode": "1f",
			"modrm.byte": "44", "sib.byte": "00", "disp.offset": 4.0, "disp.size": 1.0, "disp.value": 0.0,
		}},
		// mov 0x10(%rip),%rax at 0x1000: REX.W, RIP-relative disp32 at +3, refers to 0x1017.
		{[]string{"--addr", "0x1000", "488b0510000000"}, map[string]any{
			"len": 7.0, "text": "~mov", "rex": "48", "w": true, "r": false, "x": false, "b": false,
			"opcode": "8b", "disp.offset": 3.0, "disp.size": 4.0, "disp.value": 16.0,
			"rip_relative.disp_offset": 3.0, "rip_relative.target": "0x1017",
		}},
		// call to itself: rel32 -5 at +1.
		{[]string{"--addr", "0x401000", "e8fbffffff"}, map[string]any{
			"len": 5.0, "branch.kind": "call", "branch.relative": true,
			"branch.rel_offset": 1.0, "branch.rel_size": 4.0, "branch.target": "0x401000",
		}},
		{[]string{"c3"}, map[string]any{"len": 1.0, "text": "~ret", "branch.kind": "ret"}},
		// movabs $0x1122334455667788,%rax: imm64 at +2.
		{[]string{"48b88877665544332211"}, map[string]any{
			"len": 10.0, "imm.offset": 2.0, "imm.size": 8.0, "imm.value": "0x1122334455667788", "w": true,
		}},
		// enter $0x10,$0x1: imm16 at +1, imm8 at +3.
		{[]string{"c8100001"}, map[string]any{
			"len": 4.0, "imm.offset": 1.0, "imm.size": 2.0, "imm.value": "0x10",
			"imm2.offset": 3.0, "imm2.size": 1.0, "imm2.value": "0x1",
		}},
		{[]string{"c5f877"}, map[string]any{"len": 3.0, "encoding": "vex2", "text": "~vzeroupper"}},
		// vaddps %zmm1,%zmm0,%zmm0: EVEX, L'L = 2 (512 bits).
		{[]string{"62f17c4858c1"}, map[string]any{"len": 6.0, "encoding": "evex", "l": 2.0, "opcode": "58"}},
		// A 66 prefix on jmp rel: AMD takes a rel16 (4 bytes), Intel a rel32 (6 bytes).
		{[]string{"--vendor", "amd", "66e90000"}, map[string]any{
			"len": 4.0, "branch.kind": "jmp", "branch.rel_size": 2.0, "vendor_dependent": true, "vendor": "amd",
		}},
		{[]string{"--vendor", "intel", "66e900000000"}, map[string]any{
			"len": 6.0, "branch.kind": "jmp", "branch.rel_size": 4.0, "vendor_dependent": true, "vendor": "intel",
		}},
		// Only the first instruction is decoded; the rest is counted.
		{[]string{"90c3"}, map[string]any{"len": 1.0, "bytes": "90", "trailing": 1.0}},
		{[]string{"--syntax", "intel", "0x4889e5"}, map[string]any{"len": 3.0, "text": "~rbp", "input": "0x4889e5", "bytes": "4889e5"}},
	}
	for _, tt := range tests {
		args := append([]string{"decode", "--json"}, tt.args...)
		stdout, stderr, code := runCLI(t, args...)
		if code != exitOK {
			t.Errorf("probeopt %q: exit status %d, stderr %q, stdout %q", args, code, stderr, stdout)
			continue
		}
		objs := jsonLines(t, stdout)
		if len(objs) != 1 {
			t.Errorf("probeopt %q: %d JSON lines, want 1", args, len(objs))
			continue
		}
		obj := objs[0]
		for _, k := range append(commonKeys, "encoding", "prefixes", "map", "opcode", "regs_read", "regs_written", "vendor_dependent") {
			if _, ok := obj[k]; !ok {
				t.Errorf("probeopt %q: field %q missing", args, k)
			}
		}
		if _, ok := obj["error"]; ok {
			t.Errorf("probeopt %q: unexpected error field: %v", args, obj["error"])
		}
		checkFields(t, obj, tt.want)
	}
}

// TestDecodeFailures checks that each bad argument is reported, the others
// still decoded, and the exit status is 1 after all of them.
func TestDecodeFailures(t *testing.T) {
	// 0f and e8000000 are cut short; 06 (push %es) is invalid in 64-bit mode.
	args := []string{"decode", "--json", "zz", "f30", "0x", "0f", "e8000000", "06"}
	stdout, stderr := runCLIExit(t, exitFailed, args...)
	objs := jsonLines(t, stdout)
	if len(objs) != 6 {
		t.Fatalf("%d JSON lines, want 6:\n%s", len(objs), stdout)
	}
	wantErr := []string{"invalid hex digit 'z'", "odd number of hex digits", "empty byte string", "", "", ""}
	for i, obj := range objs {
		for _, k := range commonKeys {
			if _, ok := obj[k]; !ok {
				t.Errorf("line %d: field %q missing", i, k)
			}
		}
		msg, _ := obj["error"].(string)
		if msg == "" {
			t.Errorf("line %d (%v): no error field", i, obj["input"])
		}
		if !strings.Contains(msg, wantErr[i]) {
			t.Errorf("line %d: error %q, want it to contain %q", i, msg, wantErr[i])
		}
		if obj["len"] != 0.0 {
			t.Errorf("line %d: len %v on error, want 0", i, obj["len"])
		}
		if obj["bytes"] == "" {
			t.Errorf("line %d: empty bytes on error", i)
		}
	}
	if objs[0]["bytes"] != "zz" || objs[3]["bytes"] != "0f" {
		t.Errorf("bytes on error: %v, %v; want the input", objs[0]["bytes"], objs[3]["bytes"])
	}
	if stderr != "" {
		t.Errorf("with --json, failures belong in the JSON, but stderr has %q", stderr)
	}
}

// TestDecodeX86Truncated checks instructions cut short, with expectations
// from the manuals (0f needs an opcode byte; call rel32 needs 5 bytes).
func TestDecodeX86Truncated(t *testing.T) {
	needX86Decoder(t)
	stdout, _ := runCLIExit(t, exitFailed, "decode", "--json", "0f", "e8000000", "48", "f3")
	for _, obj := range jsonLines(t, stdout) {
		if msg, _ := obj["error"].(string); !strings.Contains(msg, "truncated") {
			t.Errorf("%v: error %q, want truncated", obj["input"], msg)
		}
	}
	// push %es does not exist in 64-bit mode.
	stdout, _ = runCLIExit(t, exitFailed, "decode", "--json", "06")
	if msg, _ := jsonLines(t, stdout)[0]["error"].(string); !strings.Contains(msg, "invalid") {
		t.Errorf("decode 06: error %q, want invalid", msg)
	}
}

// TestDecodeHuman checks the human output: a header line with the address,
// bytes and text, then indented fields; failures on stderr.
func TestDecodeHuman(t *testing.T) {
	needX86Decoder(t)
	stdout, stderr := runCLIExit(t, exitFailed, "decode", "--addr", "0x401000", "f30f1efa", "zz", "e8fbffffff")
	for _, want := range []string{
		"0x401000:  f3 0f 1e fa", "endbr64", "length", "4 bytes", "opcode", "1e (map 0f)",
		"e8 fb ff ff ff", "call to 0x401000", "registers",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	if !strings.Contains(stderr, `decode "zz": invalid hex digit`) {
		t.Errorf("stderr lacks the message for zz: %q", stderr)
	}
}

// TestDecodeARM64 decodes a few fixed arm64 words (little-endian bytes).
func TestDecodeARM64(t *testing.T) {
	// The last argument is truncated.
	stdout, _ := runCLIExit(t, exitFailed, "decode", "--arch", "arm64", "--json", "1f2003d5", "c0035fd6", "1f2003d5c0035fd6", "1f20")
	objs := jsonLines(t, stdout)
	if len(objs) != 4 {
		t.Fatalf("%d JSON lines, want 4:\n%s", len(objs), stdout)
	}
	checkFields(t, objs[0], map[string]any{"len": 4.0, "text": "~nop", "word": "d503201f", "arch": "arm64"})
	checkFields(t, objs[1], map[string]any{"len": 4.0, "text": "~ret", "word": "d65f03c0"})
	checkFields(t, objs[2], map[string]any{"len": 4.0, "bytes": "1f2003d5", "trailing": 4.0})
	if msg, _ := objs[3]["error"].(string); !strings.Contains(msg, "truncated") {
		t.Errorf("1f20: error %q, want truncated", msg)
	}

	stdout, _, code := runCLI(t, "decode", "--arch", "aarch64", "c0035fd6")
	if code != exitOK || !strings.Contains(stdout, "c0 03 5f d6") || !strings.Contains(stdout, "ret") {
		t.Errorf("human arm64 output (exit %d):\n%s", code, stdout)
	}
}

// TestDecodeARM64RegisterNames checks that the data registers of FP/SIMD
// loads and stores are named as the instruction's text (from arm64asm)
// names them, and that only an instruction with a condition has "cond".
func TestDecodeARM64RegisterNames(t *testing.T) {
	words := []string{
		"0100009c", // ldr q1, literal
		"0104403d", // ldr b1, [x0, #1]
		"e00740ad", // ldp q0, q1, [sp]
		"e10700fd", // str d1, [sp, #8]
		"e0034029", // ldp w0, w0, [sp]
		"e10740f9", // ldr x1, [sp, #8]
		"1f0000b9", // str wzr, [x0]
		"00000034", // cbz w0
		"20008054", // b.eq
		"1f2003d5", // nop
	}
	stdout, _ := runCLIExit(t, exitOK, append([]string{"decode", "--arch", "arm64", "--json"}, words...)...)
	for i, o := range jsonLines(t, stdout) {
		text, _ := o["text"].(string)
		for _, k := range []string{"rt", "rt2"} {
			if r, _ := o[k].(string); r != "" && r != "none" && !strings.Contains(text, r) {
				t.Errorf("%s (%s): %s %q is not in the text", words[i], text, k, r)
			}
		}
		if _, ok := o["cond"]; ok != (o["has_cond"] == true) {
			t.Errorf("%s (%s): cond present %v, has_cond %v", words[i], text, ok, o["has_cond"])
		}
	}
}

// TestDecodeVendorHost checks that --vendor host reads the CPU vendor where
// /proc/cpuinfo has one.
func TestDecodeVendorHost(t *testing.T) {
	if _, err := hostVendor(); err != nil {
		t.Skipf("host vendor unknown here: %v", err)
	}
	needX86Decoder(t)
	stdout, _ := runCLIExit(t, exitOK, "decode", "--vendor", "host", "--json", "c3")
	if v := jsonLines(t, stdout)[0]["vendor"]; v != "amd" && v != "intel" {
		t.Errorf("vendor %v, want amd or intel", v)
	}
}
