package serve

import (
	"embed"
	"io/fs"
	"net/http"
)

// webFiles is the web page at / (plain HTML and JavaScript, no build step).
//
//go:embed web
var webFiles embed.FS

// webHandler serves the web page: index.html at /, anything else under web/ by name.
func webHandler() http.Handler {
	sub, err := fs.Sub(webFiles, "web")
	if err != nil {
		panic("serve: embedded web files: " + err.Error())
	}
	return http.FileServerFS(sub)
}
