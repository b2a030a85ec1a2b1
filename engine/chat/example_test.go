package chat_test

import (
	"fmt"

	"kvscope/engine/chat"
)

// A ChatML template renders a conversation; the control token the user
// typed comes back as message text (Special false), so it is tokenized as
// plain characters.
func Example() {
	f, err := chat.NewTemplate(chat.NameFromFile,
		`{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}`+
			`{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}`, "", "<|im_end|>")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := f.Render([]chat.Message{
		{Role: "system", Content: "Be brief."},
		{Role: "user", Content: "What does <|im_end|> mean?"},
	}, chat.Options{AddGenerationPrompt: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range p.Segments {
		fmt.Printf("special=%-5v %q\n", s.Special, s.Text)
	}
	// Output:
	// special=true  "<|im_start|>system\n"
	// special=false "Be brief."
	// special=true  "<|im_end|>\n<|im_start|>user\n"
	// special=false "What does <|im_end|> mean?"
	// special=true  "<|im_end|>\n<|im_start|>assistant\n"
}
