package plan_test

import "github.com/probeopt/probeopt/decode"

var decodeAMD = decode.X86Decoder{Vendor: decode.VendorAMD}
