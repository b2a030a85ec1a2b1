package tokenizer_test

import (
	"fmt"
	"strings"

	"kvscope/engine/tokenizer"
)

// A tiny SentencePiece-style vocabulary: <unk>, <s>, </s>, the byte tokens
// for "é" (C3 A9), and a few pieces with scores.
func Example() {
	v := &tokenizer.Vocab{
		Model:  tokenizer.ModelSPM,
		Tokens: []string{"<unk>", "<s>", "</s>", "<0xC3>", "<0xA9>", "▁", "h", "i", "▁h", "▁hi"},
		Scores: []float32{0, 0, 0, 0, 0, -3, -3, -3, -2, -1},
		Types: []int32{tokenizer.TypeUnknown, tokenizer.TypeControl, tokenizer.TypeControl,
			tokenizer.TypeByte, tokenizer.TypeByte, 1, 1, 1, 1, 1},
		BOS: 1, EOS: 2, EOT: -1, EOM: -1, UNK: 0, PAD: -1,
		AddBOS: true, AddSpacePrefix: true,
	}
	tok, err := tokenizer.New(v)
	if err != nil {
		fmt.Println(err)
		return
	}
	ids := tok.Encode("hi hé", true, false)
	fmt.Println(ids)
	var pieces []string
	for _, id := range ids {
		pieces = append(pieces, fmt.Sprintf("%q", tok.Piece(id)))
	}
	fmt.Println(strings.Join(pieces, " "))

	// Stream the ids: the two halves of "é" come out together.
	d := tok.NewDecoder()
	for _, id := range ids {
		fmt.Printf("%q ", d.Add(id))
	}
	fmt.Printf("%q\n", d.Flush())
	fmt.Println(tok.Decode(ids), tok.IsEOG(2))
	// Output:
	// [1 9 8 3 4]
	// "<s>" " hi" " h" "\xc3" "\xa9"
	// "" "hi" " h" "" "é" ""
	// hi hé true
}
