//go:build !amd64 || noasm

package quant

// Without SIMD dequantizers, the common types use the Go ones.

func dequantQ4_0(src []byte, dst []float32) { dequantQ4_0Go(src, dst) }
func dequantQ4_1(src []byte, dst []float32) { dequantQ4_1Go(src, dst) }
func dequantQ4_K(src []byte, dst []float32) { dequantQ4_KGo(src, dst) }
func dequantQ8_0(src []byte, dst []float32) { dequantQ8_0Go(src, dst) }
func dequantQ6_K(src []byte, dst []float32) { dequantQ6_KGo(src, dst) }
func dequantF16(src []byte, dst []float32)  { dequantF16Go(src, dst) }
