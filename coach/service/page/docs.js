// The API docs: Swagger UI from this server's own copy (no CDN: the docs work offline), the bearer token the page
// keeps for this browser filled in, so that "Try it out" works on a server started with --token.
"use strict";

(function () {
  if (typeof SwaggerUIBundle !== "function") {
    document.getElementById("docs-missing").hidden = false;
    return;
  }
  const token = localStorage.getItem("coach-token") || "";
  const ui = SwaggerUIBundle({
    url: "/openapi.json",
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: true,
    onComplete: () => { if (token) ui.preauthorizeApiKey("bearer", token); },
  });
  window.coachDocs = ui;
})();
