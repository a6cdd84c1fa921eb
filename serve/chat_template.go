package serve

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/ardanlabs/jinja"
)

// ChatMessage is one message of a conversation.
type ChatMessage struct {
	Role    string // "system", "user", "assistant", ...
	Content string
}

// ChatTemplate turns a conversation into the prompt text a chat model was trained on: a
// Hugging Face chat template (the Jinja source in tokenizer_config.json's chat_template),
// rendered by github.com/ardanlabs/jinja with Hugging Face's variables (messages,
// add_generation_prompt, bos_token, eos_token) and its Jinja settings (trim_blocks,
// lstrip_blocks). A ChatTemplate is safe for concurrent use.
type ChatTemplate struct {
	tmpl     *jinja.Template
	bos, eos string
	name     string // where the template came from, for errors
}

// plainTemplate is the chat template of a tokenizer without one: each message as
// "role: content" on its own line, then "assistant:" for the reply.
const plainTemplate = `{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}
{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}`

// PlainChatTemplate returns the template used when the tokenizer has none: each message
// as "role: content" and a line, then "assistant:" when a reply is wanted.
func PlainChatTemplate() *ChatTemplate {
	t, err := NewChatTemplate(plainTemplate, "", "", "plain")
	if err != nil {
		panic(fmt.Sprintf("serve: the plain chat template does not compile: %v", err))
	}
	return t
}

// templateStart is put before every template's source and taken off its output. With it
// the template's own first text is no longer the first text segment, which ardanlabs/jinja
// v1.8.0's lstrip_blocks takes to start a line even after an expression on that line (it
// drops the space of "{{ x }} {% endfor %}" at the start of a template; Jinja2 keeps it).
// Its newline keeps the start of the template at the start of a line.
const templateStart = "\x00\n"

// NewChatTemplate compiles the Jinja source src; bos and eos are the texts of the
// tokenizer's BOS and EOS tokens, name says where src came from in errors.
func NewChatTemplate(src, bos, eos, name string) (*ChatTemplate, error) {
	t, err := jinja.Compile(templateStart + src)
	if err != nil {
		return nil, fmt.Errorf("serve: chat template of %s: %w", name, err)
	}
	return &ChatTemplate{tmpl: t, bos: bos, eos: eos, name: name}, nil
}

// LoadChatTemplate reads the chat template of the Hugging Face tokenizer directory dir
// (tokenizer_config.json's chat_template, bos_token and eos_token). It returns nil and no
// error if there is no such file or it has no chat template.
func LoadChatTemplate(dir string) (*ChatTemplate, error) {
	name := filepath.Join(dir, "tokenizer_config.json")
	b, err := os.ReadFile(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("serve: chat template: %w", err)
	}
	var cfg struct {
		ChatTemplate json.RawMessage `json:"chat_template"`
		BOS          json.RawMessage `json:"bos_token"`
		EOS          json.RawMessage `json:"eos_token"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("serve: chat template: %s: %w", name, err)
	}
	src, err := templateSource(cfg.ChatTemplate)
	if err != nil || src == "" {
		if err != nil {
			err = fmt.Errorf("serve: chat template: %s: %w", name, err)
		}
		return nil, err
	}
	return NewChatTemplate(src, tokenText(cfg.BOS), tokenText(cfg.EOS), name)
}

// templateSource reads chat_template: a string, or Hugging Face's list of named
// templates, of which it takes "default".
func templateSource(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || isNull(raw) {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var named []struct{ Name, Template string }
	if err := json.Unmarshal(raw, &named); err != nil {
		return "", errors.New("chat_template: want a string or a list of {name, template}")
	}
	for _, n := range named {
		if n.Name == "default" {
			return n.Template, nil
		}
	}
	return "", errors.New(`chat_template: no template named "default"`)
}

// tokenText reads a special token of tokenizer_config.json: a string, or an object with
// its content; "" if absent.
func tokenText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var obj struct{ Content string }
	json.Unmarshal(raw, &obj)
	return obj.Content
}

// Render returns the prompt text of msgs, followed by the start of the assistant's reply
// if addGenerationPrompt. Errors (the template's raise_exception, an unsupported
// construct met while rendering) name the template.
func (t *ChatTemplate) Render(msgs []ChatMessage, addGenerationPrompt bool) (string, error) {
	list := make([]any, len(msgs))
	for i, m := range msgs {
		list[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	out, err := t.tmpl.Render(map[string]any{
		"messages":              list,
		"add_generation_prompt": addGenerationPrompt,
		"bos_token":             t.bos,
		"eos_token":             t.eos,
	})
	if err != nil {
		return "", fmt.Errorf("serve: chat template of %s: %w", t.name, err)
	}
	// A "{%-" at the very start of the template trims the newline of templateStart.
	if rest, ok := strings.CutPrefix(out, templateStart); ok {
		return rest, nil
	}
	return strings.TrimPrefix(out, templateStart[:1]), nil
}
