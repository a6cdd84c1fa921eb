package serve

import (
	"fmt"
	"net/http/httptest"
	"strings"

	"megago/data"
)

// ExampleServer sends Megatron's PUT /api and an OpenAI completion to a server. The
// generator here is the tests' fake engine, which continues every prompt with the next
// ids; megago serve gives NewServer an Engine over the loaded model.
func ExampleServer() {
	tok, _ := data.NewNullTokenizer(100) // text is token ids separated by spaces
	srv, err := NewServer(newFake(100, 64, 4), tok, ServerConfig{ModelName: "tiny"})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range []struct{ method, path, body string }{
		{"PUT", "/api", `{"prompts": ["5 6"], "tokens_to_generate": 2}`},
		{"POST", "/v1/completions", `{"model": "tiny", "prompt": "5 6", "max_tokens": 2, "stop": " 8"}`},
	} {
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, httptest.NewRequest(r.method, r.path, strings.NewReader(r.body)))
		body := rec.Body.String()
		if i := strings.Index(body, `"choices"`); i >= 0 {
			body = body[i:] // leave out the id and creation time
		}
		fmt.Print(rec.Code, " ", body)
	}
	// Output:
	// 200 {"segments":[["5","6","7","8"]],"text":["5 67 8"],"tokens":[[5,6,7,8]]}
	// 200 "choices":[{"index":0,"text":"7","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}
}
