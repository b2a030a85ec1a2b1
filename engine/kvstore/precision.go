package kvstore

import (
	"fmt"
	"strings"
)

// Precision is the number format in which K or V values are stored.
type Precision uint8

// The storage precisions. K and V choose theirs separately (Config.K,
// Config.V). The zero value is F32.
const (
	F32  Precision = iota // 32-bit IEEE float, exact
	F16                   // IEEE half, round to nearest even (llama.cpp's default cache type)
	BF16                  // bfloat16, round to nearest even
	Q8_0                  // llama.cpp's Q8_0: groups of 32 along the token row, f16 scale
	Int8                  // KIVI-style 8-bit, symmetric (keys per channel, values per token), 8-bit scales
	Int4                  // 4-bit: keys per channel, asymmetric (E5M4 scale and zero point); values per token, rotated, IQ4_NL codebook
	FP8                   // OCP FP8 E4M3FN, scaled as Int8 (keys per channel, values per token)
	numPrecisions
)

var precisionNames = [numPrecisions]string{"f32", "f16", "bf16", "q8_0", "int8", "int4", "fp8"}

// String returns the precision's name as ParsePrecision accepts it, such as
// "q8_0".
func (p Precision) String() string {
	if p < numPrecisions {
		return precisionNames[p]
	}
	return fmt.Sprintf("Precision(%d)", uint8(p))
}

// valid reports whether p is one of the defined precisions.
func (p Precision) valid() bool { return p < numPrecisions }

// keyResidual reports whether keys stored at p are quantized per channel across
// tokens, and so keep an f16 residual while their group fills.
func (p Precision) keyResidual() bool { return p == Int8 || p == Int4 || p == FP8 }

// byteResid reports whether keys at p keep only the high byte of each f16
// residual value in their residual slot, the low byte in the key's own byte
// of data (8-bit codes: Int8, FP8).
func (p Precision) byteResid() bool { return p == Int8 || p == FP8 }

// Precisions returns every precision, in the order of their constants, for
// command-line help and tables.
func Precisions() []Precision {
	out := make([]Precision, numPrecisions)
	for i := range out {
		out[i] = Precision(i)
	}
	return out
}

// ParsePrecision returns the precision named s (case-insensitive): one of
// f32, f16, bf16, q8_0, int8, int4, fp8.
func ParsePrecision(s string) (Precision, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	for i, n := range precisionNames {
		if t == n {
			return Precision(i), nil
		}
	}
	return 0, fmt.Errorf("kvstore: unknown KV cache precision %q (valid: %s)", s, strings.Join(precisionNames[:], ", "))
}
