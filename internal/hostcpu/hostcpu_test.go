package hostcpu

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/probeopt/probeopt/decode"
)

// The /proc/cpuinfo texts: the first processor (and the start of the
// second where it matters), with the long lines cut. amdEPYC is this
// project's CI machine (Linux 6.18, KVM); centaurEsther is a VIA Esther
// posted in an Ubuntu forum; the others have the layout their kernels
// print, with the identification lines of the named parts.
const (
	intelXeon = "processor\t: 0\n" +
		"vendor_id\t: GenuineIntel\n" +
		"cpu family\t: 6\n" +
		"model\t\t: 106\n" +
		"model name\t: Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz\n" +
		"stepping\t: 6\n" +
		"microcode\t: 0xd000390\n" +
		"cpu MHz\t\t: 2900.000\n" +
		"cache size\t: 55296 KB\n" +
		"fpu\t\t: yes\n" +
		"cpuid level\t: 27\n" +
		"flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ss ht syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm abm 3dnowprefetch invpcid_single ssbd ibrs ibpb stibp ibrs_enhanced fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves wbnoinvd ida arat avx512vbmi pku ospke avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq rdpid md_clear flush_l1d arch_capabilities\n" +
		"vmx flags\t: vnmi preemption_timer invvpid ept_x_only ept_ad\n" +
		"bugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs mmio_stale_data eibrs_pbrsb gds bhi\n" +
		"bogomips\t: 5799.99\n" +
		"clflush size\t: 64\n" +
		"cache_alignment\t: 64\n" +
		"address sizes\t: 46 bits physical, 48 bits virtual\n" +
		"power management:\n" +
		"\n" +
		"processor\t: 1\n" +
		"vendor_id\t: GenuineIntel\n" +
		"cpu family\t: 6\n" +
		"model\t\t: 106\n"

	amdEPYC = "processor\t: 0\n" +
		"vendor_id\t: AuthenticAMD\n" +
		"cpu family\t: 25\n" +
		"model\t\t: 1\n" +
		"model name\t: AMD EPYC\n" +
		"stepping\t: 1\n" +
		"microcode\t: 0x1000065\n" +
		"cpu MHz\t\t: 2445.406\n" +
		"cache size\t: 512 KB\n" +
		"physical id\t: 0\n" +
		"siblings\t: 2\n" +
		"core id\t\t: 0\n" +
		"cpu cores\t: 2\n" +
		"apicid\t\t: 0\n" +
		"initial apicid\t: 0\n" +
		"fpu\t\t: yes\n" +
		"fpu_exception\t: yes\n" +
		"cpuid level\t: 16\n" +
		"wp\t\t: yes\n" +
		"flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid extd_apicid tsc_known_freq pni pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw topoext ssbd ibrs ibpb stibp vmmcall fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves clzero xsaveerptr wbnoinvd arat umip pku ospke vaes vpclmulqdq rdpid fsrm\n" +
		"bugs\t\t: sysret_ss_attrs spectre_v1 spectre_v2 spec_store_bypass srso ibpb_no_ret spectre_v2_user\n" +
		"bogomips\t: 4890.81\n" +
		"TLB size\t: 2560 4K pages\n" +
		"clflush size\t: 64\n" +
		"cache_alignment\t: 64\n" +
		"address sizes\t: 48 bits physical, 48 bits virtual\n" +
		"power management:\n" +
		"\n"

	hygonC86 = "processor\t: 0\n" +
		"vendor_id\t: HygonGenuine\n" +
		"cpu family\t: 24\n" +
		"model\t\t: 1\n" +
		"model name\t: Hygon C86 7185 32-core Processor\n" +
		"stepping\t: 1\n" +
		"microcode\t: 0x80901047\n" +
		"cpu MHz\t\t: 2000.000\n" +
		"flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid amd_dcm aperfmperf pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt xsave avx f16c rdrand lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw skinit wdt tce topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb hw_pstate sme ssbd sev ibpb vmmcall fsgsbase bmi1 avx2 smep bmi2 rdseed adx smap clflushopt sha_ni xsaveopt xsavec xgetbv1 xsaves clzero irperf xsaveerptr arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists pausefilter pfthreshold avic v_vmsave_vmload vgif overflow_recov succor smca\n" +
		"bogomips\t: 3999.77\n" +
		"address sizes\t: 43 bits physical, 48 bits virtual\n" +
		"power management: ts ttp tm hwpstate cpb eff_freq_ro [13] [14]\n" +
		"\n"

	centaurEsther = "processor\t: 0\n" +
		"vendor_id\t: CentaurHauls\n" +
		"cpu family\t: 6\n" +
		"model\t\t: 10\n" +
		"model name\t: VIA Esther processor 1500MHz\n" +
		"stepping\t: 9\n" +
		"cpu MHz\t\t: 1496.127\n" +
		"cache size\t: 128 KB\n" +
		"fdiv_bug\t: no\n" +
		"hlt_bug\t\t: no\n" +
		"f00f_bug\t: no\n" +
		"coma_bug\t: no\n" +
		"fpu\t\t: yes\n" +
		"fpu_exception\t: yes\n" +
		"cpuid level\t: 1\n" +
		"wp\t\t: yes\n" +
		"flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge cmov pat clflush acpi mmx fxsr sse sse2 tm nx up pni rng rng_en ace ace_en ace2 ace2_en phe phe_en pmm pmm_en\n" +
		"bogomips\t: 2992.25\n" +
		"clflush size\t: 64\n" +
		"cache_alignment\t: 64\n" +
		"address sizes\t: 36 bits physical, 32 bits virtual\n" +
		"power management:\n" +
		"\n"

	// The cpuid vendor string of Zhaoxin is "  Shanghai  "; cpuinfo
	// prints it after "\t: ".
	zhaoxinKX = "processor\t: 0\n" +
		"vendor_id\t:   Shanghai  \n" +
		"cpu family\t: 7\n" +
		"model\t\t: 27\n" +
		"model name\t: ZHAOXIN KaiXian KX-U6780A@2.7GHz\n" +
		"stepping\t: 0\n" +
		"cpu MHz\t\t: 2700.000\n" +
		"flags\t\t: fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc rep_good nopl xtopology nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx est tm2 ssse3 cx16 xtpr pdcm sse4_1 sse4_2 x2apic popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm 3dnowprefetch ibrs ibpb stibp tpr_shadow vnmi flexpriority ept vpid fsgsbase tsc_adjust smep erms xsaveopt arat umip ssbd\n" +
		"bogomips\t: 5400.00\n" +
		"address sizes\t: 40 bits physical, 48 bits virtual\n" +
		"power management:\n" +
		"\n"

	arm64Neoverse = "processor\t: 0\n" +
		"BogoMIPS\t: 243.75\n" +
		"Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp ssbs\n" +
		"CPU implementer\t: 0x41\n" +
		"CPU architecture: 8\n" +
		"CPU variant\t: 0x3\n" +
		"CPU part\t: 0xd0c\n" +
		"CPU revision\t: 1\n" +
		"\n" +
		"processor\t: 1\n" +
		"BogoMIPS\t: 243.75\n"
)

// hostAuxv is /proc/self/auxv of a process on the CI machine (amd64):
// AT_HWCAP2 (0x1a) is 2, HWCAP2_FSGSBASE.
const hostAuxv = "2100000000000000 00c0670f427f0000 3300000000000000 300d000000000000" +
	"1000000000000000 fffb8b1700000000 0600000000000000 0010000000000000" +
	"1100000000000000 6400000000000000 0300000000000000 4090a9158a550000" +
	"0400000000000000 3800000000000000 0500000000000000 0d00000000000000" +
	"0700000000000000 00e0670f427f0000 0800000000000000 0000000000000000" +
	"0900000000000000 c0c4a9158a550000 0b00000000000000 0000000000000000" +
	"0c00000000000000 0000000000000000 0d00000000000000 0000000000000000" +
	"0e00000000000000 0000000000000000 1700000000000000 0000000000000000" +
	"1900000000000000 59c356e7fd7f0000 1a00000000000000 0200000000000000" +
	"1f00000000000000 ecdf56e7fd7f0000 0f00000000000000 69c356e7fd7f0000" +
	"1b00000000000000 1c00000000000000 1c00000000000000 2000000000000000" +
	"0000000000000000 0000000000000000"

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// auxv64 and auxv32 build an auxiliary vector of (type, value) pairs,
// ending in AT_NULL.
func auxv64(pairs ...uint64) []byte {
	var b []byte
	for _, w := range append(pairs, 0, 0) {
		b = binary.LittleEndian.AppendUint64(b, w)
	}
	return b
}

func auxv32(pairs ...uint32) []byte {
	var b []byte
	for _, w := range append(pairs, 0, 0) {
		b = binary.LittleEndian.AppendUint32(b, w)
	}
	return b
}

// TestParse checks the description of each vendor's cpuinfo, and the
// vendor the decoder is given.
func TestParse(t *testing.T) {
	withHWCAP2 := auxv64(atHWCAP2, hwcap2FSGSBase)
	tests := []struct {
		name    string
		arch    string
		cpuinfo string
		auxv    []byte
		want    Info // Flags: only their number is checked, in nflags
		nflags  int
		decode  decode.Vendor
		wantErr error
	}{
		{"intel xeon", "amd64", intelXeon, withHWCAP2, Info{
			Arch: "amd64", VendorID: "GenuineIntel", Vendor: Intel, Family: 6, Model: 106, Stepping: 6,
			ModelName: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", FSGSBase: true, RDPID: true, LAHF: true,
		}, 105, decode.VendorIntel, nil},
		{"intel xeon with 5-level paging", "amd64", strings.Replace(intelXeon, " pku ", " pku la57 ", 1), nil, Info{
			Arch: "amd64", VendorID: "GenuineIntel", Vendor: Intel, Family: 6, Model: 106, Stepping: 6,
			ModelName: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", LA57: true, RDPID: true, LAHF: true,
		}, 106, decode.VendorIntel, nil},
		{"amd epyc", "amd64", amdEPYC, unhex(t, hostAuxv), Info{
			Arch: "amd64", VendorID: "AuthenticAMD", Vendor: AMD, Family: 25, Model: 1, Stepping: 1,
			ModelName: "AMD EPYC", FSGSBase: true, RDPID: true, LAHF: true,
		}, 99, decode.VendorAMD, nil},
		{"hygon", "amd64", hygonC86, auxv64(atHWCAP2, 0), Info{
			Arch: "amd64", VendorID: "HygonGenuine", Vendor: Hygon, Family: 24, Model: 1, Stepping: 1,
			ModelName: "Hygon C86 7185 32-core Processor", LAHF: true,
		}, 112, decode.VendorAMD, nil},
		{"centaur (32-bit)", "386", centaurEsther, auxv32(16, 0xa7e9fbbf, atHWCAP2, hwcap2FSGSBase), Info{
			Arch: "386", VendorID: "CentaurHauls", Vendor: Centaur, Family: 6, Model: 10, Stepping: 9,
			ModelName: "VIA Esther processor 1500MHz", FSGSBase: true,
		}, 35, decode.VendorIntel, ErrUncharacterised},
		{"zhaoxin", "amd64", zhaoxinKX, nil, Info{
			Arch: "amd64", VendorID: "Shanghai", Vendor: Zhaoxin, Family: 7, Model: 27, Stepping: 0,
			ModelName: "ZHAOXIN KaiXian KX-U6780A@2.7GHz", LAHF: true,
		}, 79, decode.VendorIntel, ErrUncharacterised},
		{"arm64", "arm64", arm64Neoverse, auxv64(atHWCAP2, 0xffff), Info{Arch: "arm64"}, 17, decode.VendorAMD, ErrUnknownVendor},
		// x86 cpuinfo read by an arm64 build (qemu-user): nothing x86.
		{"intel text, arm64 build", "arm64", intelXeon, withHWCAP2, Info{
			Arch: "arm64", ModelName: "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz",
		}, 0, decode.VendorAMD, ErrUnknownVendor},
		{"unknown vendor", "amd64", "processor\t: 0\nvendor_id\t: SomeNewVendor\ncpu family\t: 1\n", nil, Info{
			Arch: "amd64", VendorID: "SomeNewVendor", Family: 1,
		}, 0, decode.VendorAMD, ErrUnknownVendor},
		{"vendor_id without spaces", "amd64", "vendor_id : HygonGenuine\n", nil, Info{
			Arch: "amd64", VendorID: "HygonGenuine", Vendor: Hygon,
		}, 0, decode.VendorAMD, nil},
		{"stepping unknown", "amd64", "vendor_id\t: GenuineIntel\nstepping\t: unknown\n", nil, Info{
			Arch: "amd64", VendorID: "GenuineIntel", Vendor: Intel,
		}, 0, decode.VendorIntel, nil},
		{"empty", "amd64", "", nil, Info{Arch: "amd64"}, 0, decode.VendorAMD, ErrUnknownVendor},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Parse(tt.arch, []byte(tt.cpuinfo), tt.auxv)
			if len(got.Flags) != tt.nflags {
				t.Errorf("%d flags, want %d: %q", len(got.Flags), tt.nflags, got.Flags)
			}
			got.Flags = nil
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Parse =\n%+v\nwant\n%+v", got, tt.want)
			}
			v, err := got.X86Vendor()
			if v != tt.decode || (tt.wantErr == nil) != (err == nil) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Errorf("X86Vendor = %v, %v; want %v, %v", v, err, tt.decode, tt.wantErr)
			}
			if errors.Is(err, ErrUncharacterised) && errors.Is(err, ErrUnknownVendor) {
				t.Errorf("X86Vendor error %v wraps both sentinels", err)
			}
		})
	}
}

// TestParseFirstProcessor checks that only the first processor counts:
// a later one's lines (here a flag the first lacks) are not mixed in.
func TestParseFirstProcessor(t *testing.T) {
	text := amdEPYC + "processor\t: 1\nvendor_id\t: GenuineIntel\nflags\t\t: la57\n"
	got := Parse("amd64", []byte(text), nil)
	if got.Vendor != AMD || got.LA57 || got.HasFlag("la57") || !got.HasFlag("avx2") {
		t.Errorf("Parse: vendor %v, la57 %v, flags %q", got.Vendor, got.LA57, got.Flags)
	}
	arm := Parse("arm64", []byte(arm64Neoverse), nil)
	if !arm.HasFlag("atomics") || arm.HasFlag("fpu") || arm.LAHF {
		t.Errorf("arm64 flags %q, lahf %v", arm.Flags, arm.LAHF)
	}
}

// TestParseAuxv checks AT_HWCAP2 in 64-bit and 32-bit vectors: the bit,
// the end at AT_NULL, and vectors cut short.
func TestParseAuxv(t *testing.T) {
	host := unhex(t, hostAuxv)
	tests := []struct {
		name string
		arch string
		auxv []byte
		want bool
	}{
		{"ci machine", "amd64", host, true},
		{"ci machine, cut before AT_HWCAP2", "amd64", host[:16*17], false},
		{"ci machine, cut inside AT_HWCAP2", "amd64", host[:16*17+12], false},
		{"hwcap2 without fsgsbase", "amd64", auxv64(6, 4096, atHWCAP2, 1|1<<2), false},
		{"hwcap2 fsgsbase among others", "amd64", auxv64(6, 4096, atHWCAP2, 1|hwcap2FSGSBase), true},
		{"after AT_NULL", "amd64", append(auxv64(6, 4096), auxv64(atHWCAP2, hwcap2FSGSBase)...), false},
		{"no hwcap2", "amd64", auxv64(16, 0x178bfbff), false},
		{"empty", "amd64", nil, false},
		{"386", "386", auxv32(6, 4096, atHWCAP2, hwcap2FSGSBase), true},
		// A 32-bit vector read as 64-bit words: type 0x10000001a, not
		// AT_HWCAP2.
		{"386 vector as amd64", "amd64", auxv32(atHWCAP2, hwcap2FSGSBase), false},
		// A 64-bit vector read as 32-bit words: (26, 0), then (2, 0).
		{"amd64 vector as 386", "386", auxv64(atHWCAP2, hwcap2FSGSBase), false},
		// HWCAP2 bit 1 is another feature on arm64 (SVE2).
		{"arm64", "arm64", auxv64(atHWCAP2, hwcap2FSGSBase), false},
	}
	for _, tt := range tests {
		if got := Parse(tt.arch, nil, tt.auxv).FSGSBase; got != tt.want {
			t.Errorf("%s: FSGSBase %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestVendorString checks the names of the vendors.
func TestVendorString(t *testing.T) {
	var got []string
	for v := Unknown; v <= Zhaoxin+1; v++ {
		got = append(got, v.String())
	}
	want := []string{"unknown", "Intel", "AMD", "Hygon", "Centaur", "Zhaoxin", "unknown"}
	if !slices.Equal(got, want) {
		t.Errorf("names %q, want %q", got, want)
	}
}

// TestX86VendorReadError checks that an unreadable /proc/cpuinfo is an
// unknown vendor whose error keeps the cause.
func TestX86VendorReadError(t *testing.T) {
	cause := errors.New("no such file")
	i := Info{Arch: "amd64", cpuinfoErr: cause}
	v, err := i.X86Vendor()
	if v != decode.VendorAMD || !errors.Is(err, ErrUnknownVendor) || !errors.Is(err, cause) {
		t.Errorf("X86Vendor = %v, %v; want amd and an unknown vendor caused by %v", v, err, cause)
	}
	if !errors.Is(i.Err(), cause) {
		t.Errorf("Err = %v, want %v", i.Err(), cause)
	}
	if err := (&Info{}).Err(); err != nil {
		t.Errorf("Err of a parsed Info = %v", err)
	}
}

// TestHostOnce checks that Host reads once: concurrent callers get the
// same Info.
func TestHostOnce(t *testing.T) {
	const n = 8
	got := make(chan *Info, n)
	for range n {
		go func() { got <- Host() }()
	}
	first := <-got
	for range n - 1 {
		if i := <-got; i != first {
			t.Fatalf("Host returned %p and %p", first, i)
		}
	}
}
