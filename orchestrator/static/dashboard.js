// ralph serve: live updates over server-sent events. The server renders every piece of HTML
// and SVG; this script only puts it in place (no libraries, nothing from the network).
(function () {
  "use strict";
  var body = document.body;
  if (body.dataset.follow !== "1") return;
  var agent = document.getElementById("agent");
  var facts = document.getElementById("facts");
  var rows = document.querySelector("#iterations tbody");
  var chartBox = document.getElementById("chart-box");
  var KEEP = 200; // agent lines kept on the page

  function listen(run) {
    var after = rows ? rows.children.length : 0;
    var url = "/events?after=" + after + (run ? "&run=" + encodeURIComponent(run) : "");
    var source = new EventSource(url);
    source.addEventListener("line", function (e) {
      var div = document.createElement("div");
      div.textContent = e.data;
      agent.appendChild(div);
      while (agent.children.length > KEEP) agent.removeChild(agent.firstChild);
      agent.scrollTop = agent.scrollHeight;
    });
    source.addEventListener("state", function (e) {
      facts.textContent = "";
      JSON.parse(e.data).forEach(function (line) {
        var div = document.createElement("div");
        div.textContent = line;
        facts.appendChild(div);
      });
    });
    function replaceRun(data) {
      var tr = document.querySelector('#runs tr[data-run="' + data.run + '"]');
      if (tr) tr.outerHTML = data.run_row; // rendered and escaped by the server
    }
    source.addEventListener("iteration", function (e) {
      var data = JSON.parse(e.data);
      rows.insertAdjacentHTML("beforeend", data.row); // rendered and escaped by the server
      chartBox.innerHTML = data.chart;
      replaceRun(data);
    });
    source.addEventListener("run", function () {
      source.close();
      window.location.reload(); // a new run went live: show it
    });
    source.addEventListener("end", function (e) {
      source.close();
      replaceRun(JSON.parse(e.data));
      body.classList.add("ended");
      listen(""); // wait for the next run
    });
  }
  listen(body.dataset.run);
})();
