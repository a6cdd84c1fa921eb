package serve

import (
	"strings"
	"testing"

	"megago/data"
)

func TestTextStream(t *testing.T) {
	tok := data.BuiltinGPT2()
	tests := []struct {
		name, text string
		stops      []string
		want       string // the whole text shown
	}{
		{"plain", "Hello world, again.", nil, "Hello world, again."},
		{"split characters", "smile 🙂 and 漢字 ok", nil, "smile 🙂 and 漢字 ok"},
		{"stop", "hello world and more", []string{"lo w"}, "hel"},
		{"first of two stops", "one two three", []string{"three", " two"}, "one"},
		{"stop prefix not completed", "abc abd", []string{"abx"}, "abc abd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids := tok.Encode(tt.text)
			ts := &textStream{tok: tok, stops: tt.stops}
			var shown strings.Builder
			for _, id := range ids {
				d, stop := ts.push(id)
				if strings.ContainsRune(d, '\uFFFD') {
					t.Errorf("delta %q holds an incomplete character", d)
				}
				for _, s := range tt.stops {
					if strings.Contains(shown.String()+d, s) {
						t.Errorf("stop string %q shown", s)
					}
				}
				shown.WriteString(d)
				if stop {
					break
				}
			}
			shown.WriteString(ts.flush())
			if shown.String() != tt.want || ts.text != tt.want {
				t.Errorf("shown %q, want %q", shown.String(), tt.want)
			}
		})
	}
}
