// The grade page's count of active seconds, and the confirmation before a final submit.
// Active: the page is visible and the grader used mouse, keyboard or scrolling within the last minute.
// The count goes to the form's hidden field; the server caps it at the time since it served the page.
"use strict";
(function () {
  var IDLE_MS = 60 * 1000;
  var form = document.getElementById("grade-form");
  var field = document.getElementById("active_s");
  if (!form || !field || form.classList.contains("readonly")) return;

  var active = parseFloat(field.value) || 0;  // carried over when the server refused a save
  var lastUse = Date.now();
  ["pointerdown", "pointermove", "keydown", "input", "wheel", "scroll", "touchstart", "focusin"].forEach(function (kind) {
    window.addEventListener(kind, function () { lastUse = Date.now(); }, { capture: true, passive: true });
  });
  window.setInterval(function () {
    if (document.visibilityState === "visible" && Date.now() - lastUse < IDLE_MS) {
      active += 1;
      field.value = String(active);
    }
  }, 1000);

  form.addEventListener("submit", function (event) {
    field.value = String(active);
    var button = event.submitter;
    if (button && button.value === "submit" &&
        !window.confirm("Submit this grade? A submitted grade is final and cannot be changed.")) {
      event.preventDefault();
    }
  });
})();
