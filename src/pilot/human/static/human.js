// The task page's clock, its count of active seconds, and the confirmations before a final step.
// Active: the page is visible and the participant used mouse, keyboard or scrolling within the last minute.
// The count goes to the server every 30 seconds (and when the page is left); the server keeps at most the time
// since it served the page. The clock shows the time left; the server alone enforces the limit.
"use strict";
(function () {
  var IDLE_MS = 60 * 1000;
  var clock = document.getElementById("clock");
  if (clock) {
    var deadline = Number(clock.dataset.deadline);
    var shown = document.getElementById("time-left");
    var active = 0;
    var lastUse = Date.now();
    ["pointerdown", "pointermove", "keydown", "input", "wheel", "scroll", "touchstart", "focusin"].forEach(function (kind) {
      window.addEventListener(kind, function () { lastUse = Date.now(); }, { capture: true, passive: true });
    });
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    var tick = function () {
      var left = Math.max(0, Math.floor((deadline - Date.now()) / 1000));
      shown.textContent = Math.floor(left / 3600) + ":" + pad(Math.floor(left % 3600 / 60)) + ":" + pad(left % 60);
      clock.classList.toggle("low", left > 0 && left <= 300);
      clock.classList.toggle("over", left === 0);
      if (document.visibilityState === "visible" && Date.now() - lastUse < IDLE_MS) { active += 1; }
    };
    var report = function () {
      var body = new URLSearchParams({ csrf: clock.dataset.csrf, view: clock.dataset.view, seconds: String(active) });
      return fetch(clock.dataset.activeUrl, { method: "POST", body: body, credentials: "same-origin", keepalive: true });
    };
    tick();
    window.setInterval(tick, 1000);
    window.setInterval(report, 30000);
    window.addEventListener("pagehide", report);
    document.addEventListener("visibilitychange", function () { if (document.visibilityState === "hidden") { report(); } });
  }
  var record = document.getElementById("record-form");
  if (record) {
    record.addEventListener("submit", function (event) {
      var button = event.submitter;
      if (button && button.value === "submit" &&
          !window.confirm("Submit your work? The clock stops and nothing can be changed afterwards.")) {
        event.preventDefault();
      }
    });
  }
  var chat = document.getElementById("chat");
  if (chat && chat.lastElementChild) { chat.lastElementChild.scrollIntoView({ block: "nearest" }); }
})();
