package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode"

	"github.com/probeopt/probeopt/decode"
)

// arm64Fields is the JSON and human description of a decoded arm64
// instruction: the word, then every exported field of the
// decoder's result, named in snake_case, in declaration order.
type arm64Fields struct {
	Word   string `json:"word"`
	fields object
}

func newARM64Fields(a *arm64Decoded) *arm64Fields {
	f := &arm64Fields{Word: fmt.Sprintf("%08x", a.Word)}
	if a.Fields != nil {
		f.fields = reflectObject(reflect.ValueOf(a.Fields)).arm64Names()
	}
	return f
}

// arm64Names names the data registers by their size: q1 for a 16-byte
// FP/SIMD load, w1 for a 32-bit general-purpose one (not x1); and it leaves
// out the condition of an instruction that
// has none (its zero value would read as eq).
func (o object) arm64Names() object {
	get := func(key string) any {
		for _, kv := range o {
			if kv.key == key {
				return kv.val
			}
		}
		return nil
	}
	prefix := ""
	switch {
	case get("vec") == true:
		if n, ok := get("mem_size").(int); ok {
			prefix = map[int]string{1: "b", 2: "h", 4: "s", 8: "d", 16: "q"}[n]
		}
	case get("width") == 32:
		prefix = "w"
	}
	hasCond := get("has_cond") == true
	out := o[:0:0]
	for _, kv := range o {
		switch kv.key {
		case "cond":
			if !hasCond {
				continue
			}
		case "rt", "rt2":
			if name, ok := kv.val.(string); ok && prefix != "" && len(name) > 1 && (name[0] == 'x' || name[0] == 'w') {
				kv.val = prefix + name[1:]
			}
		}
		out = append(out, kv)
	}
	return out
}

// lines renders the fields for people, leaving out those shown in the
// header already and those with a zero value (false, 0, no register), so
// that what remains is what the instruction has.
func (f *arm64Fields) lines() []field {
	out := []field{{"word", f.Word}}
	shown := map[string]bool{"addr": true, "len": true, "word": true, "mnemonic": true}
	for _, kv := range f.fields {
		switch {
		case shown[kv.key]:
			continue
		case kv.key == "cond": // 0 is eq, a real condition: shown when there is one
		case kv.zero:
			continue
		}
		out = append(out, field{strings.ReplaceAll(kv.key, "_", " "), humanValue(kv.val)})
	}
	return out
}

// MarshalJSON writes the decodeResult's own fields, then any fields found by
// reflection on the arm64 decoder's result that do not clash with them.
func (r decodeResult) MarshalJSON() ([]byte, error) {
	type plain decodeResult // without this method
	b, err := json.Marshal(plain(r))
	if err != nil || r.arm64Fields == nil || len(r.arm64Fields.fields) == 0 {
		return b, err
	}
	taken := map[string]bool{}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, err
	}
	for k := range keys {
		taken[k] = true
	}
	var extra object
	for _, kv := range r.arm64Fields.fields {
		if !taken[kv.key] {
			extra = append(extra, kv)
		}
	}
	if len(extra) == 0 {
		return b, nil
	}
	more, err := json.Marshal(extra)
	if err != nil {
		return nil, err
	}
	// Splice {"a":1} and {"b":2} into {"a":1,"b":2}.
	b = bytes.TrimSuffix(bytes.TrimSpace(b), []byte("}"))
	return append(append(b, ','), more[1:]...), nil
}

// keyValue is one field of an object.
type keyValue struct {
	key  string
	val  any
	zero bool // the Go value was the zero value, or names no register
}

// object is a list of fields that marshals as a JSON object in order.
type object []keyValue

func (o object) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, kv := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(kv.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(kv.val)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", kv.key, err)
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

var stringerType = reflect.TypeFor[fmt.Stringer]()

// reflectObject lists the exported fields of a struct (or pointer to one).
func reflectObject(v reflect.Value) object {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return object{{key: "value", val: reflectValue("value", v)}}
	}
	var o object
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		fv := v.Field(i)
		val := reflectValue(sf.Name, fv)
		zero := fv.IsZero() || val == "none"
		if names, ok := val.([]string); ok && len(names) == 0 {
			zero = true
		}
		o = append(o, keyValue{key: snakeCase(sf.Name), val: val, zero: zero})
	}
	return o
}

// reflectValue converts one field to something JSON and people read well:
// register sets become register names, enumerations their names, addresses
// and words hex strings, byte arrays hex.
func reflectValue(name string, v reflect.Value) any {
	if !v.CanInterface() {
		return nil
	}
	switch x := v.Interface().(type) {
	case decode.RegSet:
		return regNames(decode.ARM64, x)
	case []byte:
		return fmt.Sprintf("%x", x)
	}
	if v.Type().Implements(stringerType) && v.Kind() != reflect.Struct && v.Kind() != reflect.Pointer {
		return v.Interface().(fmt.Stringer).String()
	}
	switch v.Kind() {
	case reflect.Uint64, reflect.Uint32, reflect.Uintptr:
		if looksLikeAddress(name) {
			return fmt.Sprintf("%#x", v.Uint())
		}
	case reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, v.Len())
			reflect.Copy(reflect.ValueOf(b), v)
			return fmt.Sprintf("%x", b)
		}
	case reflect.Struct, reflect.Pointer:
		return reflectObject(v)
	}
	return v.Interface()
}

// looksLikeAddress reports whether a field name suggests an address or an
// encoding, which read best in hex.
func looksLikeAddress(name string) bool {
	n := strings.ToLower(name)
	return slices.ContainsFunc([]string{"addr", "target", "pc", "enc", "word", "raw"}, func(s string) bool {
		return strings.Contains(n, s)
	})
}

// snakeCase turns a Go field name into snake_case: "RegsRead" -> "regs_read",
// "PCRelOff" -> "pc_rel_off".
func snakeCase(s string) string {
	r := []rune(s)
	var sb strings.Builder
	for i, c := range r {
		if unicode.IsUpper(c) && i > 0 {
			prevLower := unicode.IsLower(r[i-1]) || unicode.IsDigit(r[i-1])
			nextLower := i+1 < len(r) && unicode.IsLower(r[i+1])
			if prevLower || (unicode.IsUpper(r[i-1]) && nextLower) {
				sb.WriteByte('_')
			}
		}
		sb.WriteRune(unicode.ToLower(c))
	}
	return sb.String()
}

// humanValue renders a reflected value on one line.
func humanValue(v any) string {
	switch x := v.(type) {
	case []string:
		return regList(x)
	case object:
		parts := make([]string, len(x))
		for i, kv := range x {
			parts[i] = kv.key + "=" + humanValue(kv.val)
		}
		return strings.Join(parts, " ")
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}
