"""Files to attach in tests, made in code: a PDF written by hand (PDF 1.4, one Helvetica text line per line of
the page), encrypted with pypdf, and DOCX files through python-docx."""

from __future__ import annotations

from io import BytesIO


def make_pdf(pages: list[str]) -> bytes:
    """A valid PDF whose page N shows ``pages[N-1]`` (lines split on newlines), with a correct xref table."""
    count = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(count))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, text in enumerate(pages):
        lines = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)") for line in text.split("\n")]
        stream = "BT /F1 11 Tf 14 TL 50 780 Td " + " ".join(f"({line}) Tj T*" for line in lines) + " ET"
        objects.append(f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 3 0 R"
                       f" >> >> /Contents {5 + 2 * i} 0 R >>".encode())  # fmt: skip
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream}\nendstream".encode())
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def encrypted_pdf(pages: list[str], password: str = "s3cret") -> bytes:
    """``make_pdf(pages)`` encrypted (AES-free RC4, what pypdf writes without extra packages) with a password."""
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(BytesIO(make_pdf(pages))))
    writer.encrypt(user_password=password, owner_password=password, algorithm="RC4-128")
    out = BytesIO()
    writer.write(out)
    return out.getvalue()


def make_docx(blocks: list[tuple[str, str]]) -> bytes:
    """A DOCX of (style, text) blocks: style "h1" a heading, "p" a paragraph, "row" a table row (cells by " | ")."""
    import docx

    document = docx.Document()
    table = None
    for style, text in blocks:
        if style == "row":
            cells = text.split(" | ")
            if table is None:
                table = document.add_table(rows=0, cols=len(cells))
            row = table.add_row()
            for cell, value in zip(row.cells, cells, strict=True):
                cell.text = value
            continue
        table = None
        if style == "h1":
            document.add_heading(text, level=1)
        else:
            document.add_paragraph(text)
    out = BytesIO()
    document.save(out)
    return out.getvalue()
