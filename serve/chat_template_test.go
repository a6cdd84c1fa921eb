package serve

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// chatGoldens is testdata/chat/golden.json, written by gen.mjs with @huggingface/jinja.
type chatGoldens struct {
	Conversations [][]struct{ Role, Content string }
	Goldens       []struct {
		Template, Bos, Eos  string
		Conversation        int
		AddGenerationPrompt bool `json:"add_generation_prompt"`
		Error               bool
		Want                string
	}
}

// goldenTemplate returns the template a golden names: the chat_template of a tokenizer
// directory in data/testdata/hf, a .jinja file of testdata/chat, or the plain one.
func goldenTemplate(t *testing.T, name, bos, eos string) *ChatTemplate {
	t.Helper()
	if name == "plain" {
		return PlainChatTemplate()
	}
	if src, err := os.ReadFile(filepath.Join("testdata", "chat", name+".jinja")); err == nil {
		tmpl, err := NewChatTemplate(string(src), bos, eos, name)
		if err != nil {
			t.Fatal(err)
		}
		return tmpl
	}
	tmpl, err := LoadChatTemplate(filepath.Join("..", "data", "testdata", "hf", name))
	if err != nil || tmpl == nil {
		t.Fatalf("chat template %s: %v", name, err)
	}
	return tmpl
}

func TestChatTemplateGoldens(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "chat", "golden.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g chatGoldens
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	templates := map[string]*ChatTemplate{}
	for _, gd := range g.Goldens {
		t.Run(fmt.Sprintf("%s/%d/%v", gd.Template, gd.Conversation, gd.AddGenerationPrompt), func(t *testing.T) {
			tmpl := templates[gd.Template]
			if tmpl == nil {
				tmpl = goldenTemplate(t, gd.Template, gd.Bos, gd.Eos)
				templates[gd.Template] = tmpl
			}
			var msgs []ChatMessage
			for _, m := range g.Conversations[gd.Conversation] {
				msgs = append(msgs, ChatMessage{Role: m.Role, Content: m.Content})
			}
			got, err := tmpl.Render(msgs, gd.AddGenerationPrompt)
			if gd.Error {
				if err == nil {
					t.Errorf("rendered %q, want an error", got)
				}
				return
			}
			if err != nil || got != gd.Want {
				t.Errorf("got %q (%v)\nwant %q", got, err, gd.Want)
			}
		})
	}
}

func TestChatTemplateErrors(t *testing.T) {
	tmpl := goldenTemplate(t, "llama2", "<s>", "</s>")
	_, err := tmpl.Render([]ChatMessage{{"assistant", "first"}}, true)
	if err == nil || !strings.Contains(err.Error(), "Conversation roles must alternate") {
		t.Errorf("raise_exception: %v", err)
	}
	if _, err := NewChatTemplate("{% for %}", "", "", "broken"); err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("a template that does not parse: %v", err)
	}
	if tmpl, err := LoadChatTemplate(filepath.Join("..", "data", "testdata", "hf", "gpt2")); tmpl != nil || err != nil {
		t.Errorf("a tokenizer without chat_template: %v, %v; want nil, nil", tmpl, err)
	}
}
