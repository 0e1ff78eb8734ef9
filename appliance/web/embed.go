// Package web holds the viewer panel (index.html, app.js, input.js,
// style.css: plain ES modules, no build step) and welcome.html, the start page a new
// session opens. The files are embedded and served as they are.
package web

import "embed"

// FS holds the panel files at its root.
//
//go:embed *.html *.js *.css
var FS embed.FS
