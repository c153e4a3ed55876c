"""A small scenario folder with real office inputs, for the portal tests."""

from __future__ import annotations

import http.client
import socket
from pathlib import Path
from urllib.parse import urlsplit

SECRET_MARKER = "OUTSIDE-THE-CONTENT-FOLDER-7f3a"


def make_scenario(root: Path, sid: str = "TEST-01") -> Path:
    """``root/sid`` with scenario.yml and inputs in CSV, xlsx, docx, PDF and text."""
    from docx import Document
    from openpyxl import Workbook
    from reportlab.pdfgen import canvas

    scenario = root / sid
    inputs = scenario / "inputs"
    (inputs / "statements").mkdir(parents=True)
    (scenario / "scenario.yml").write_text(f"id: {sid}\nuses_portal: true\ncompany: Northwind Ltd\n")
    (inputs / "vendor_invoices.csv").write_text(
        "invoice_no,vendor,amount,due_date,account\n"
        "INV-1001,Acme Supplies,1200.50,2026-01-31,00420\n"
        "INV-1002,Globex GmbH,300,2026-02-15,00421\n"
        'INV-1003,"Initech, Inc.",77.25,2026-02-28,00422\n'
    )
    (inputs / "statements" / "client_statement_q3.csv").write_text(
        "date;description;debit;credit\n2026-07-01;Opening balance;0;1500.00\n2026-08-15;Fee;25.00;0\n"
    )
    (inputs / "travel_policy.txt").write_text("Meals are reimbursed up to 40 per day.\n")
    doc = Document()
    doc.add_paragraph("Engagement letter for the audit of the 2026 accounts.")
    doc.save(inputs / "engagement_letter.docx")
    wb = Workbook()
    wb.active.append(["grade", "hourly_rate"])
    wb.active.append(["Senior", 180])
    wb.save(inputs / "rate_card.xlsx")
    c = canvas.Canvas(str(inputs / "contract.pdf"))
    c.drawString(72, 720, "Master services agreement")
    c.save()
    # Files beside the content folder that no request may ever reach.
    (scenario / "secret.txt").write_text(SECRET_MARKER)
    (root / "secret.txt").write_text(SECRET_MARKER)
    return scenario


def raw_get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """GET with the path sent exactly as given (no client-side normalisation of ``..``)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=5)
    try:
        conn.putrequest("GET", path, skip_accept_encoding=True)
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def read_json_answer(sock: socket.socket) -> bytes:
    """An HTTP answer read off ``sock`` until its JSON body is complete or the server closes the connection."""
    data = b""
    while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def basic_auth(username: str, password: str) -> dict[str, str]:
    import base64

    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
