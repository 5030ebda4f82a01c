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


def make_xlsx(sheets: dict[str, list[list[object]]]) -> bytes:
    """An XLSX workbook through openpyxl, one sheet per entry (rows of cell values; a str starting "=" a formula)."""
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    out = BytesIO()
    book.save(out)
    return out.getvalue()


def make_pptx(slides: list[list[str]]) -> bytes:
    """A minimal PPTX package (no library writes one without Pillow): the parts a reader needs, each slide's
    paragraphs as DrawingML text runs in a shape tree, as PowerPoint writes them."""
    import zipfile

    ns = ('xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
          'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"')  # fmt: skip
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.'
                         'org/package/2006/content-types"/>')  # fmt: skip
        archive.writestr("ppt/presentation.xml", f'<?xml version="1.0"?><p:presentation {ns}/>')
        for number, paragraphs in enumerate(slides, start=1):
            runs = "".join(f"<a:p><a:r><a:t>{text}</a:t></a:r></a:p>" for text in paragraphs)
            archive.writestr(f"ppt/slides/slide{number}.xml", f'<?xml version="1.0"?><p:sld {ns}><p:cSld><p:spTree>'
                             f"<p:sp><p:txBody>{runs}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>")  # fmt: skip
    return out.getvalue()


def make_odt(blocks: list[tuple[str, str]], doctype: str = "") -> bytes:
    """A minimal ODT package (mimetype first, content.xml) of (style, text) blocks: "h" a heading, "p" a
    paragraph; ``doctype`` is put before the root (to try entity tricks)."""
    import zipfile

    ns = 'xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" ' \
         'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0"'  # fmt: skip
    body = "".join(f"<text:{style}>{text}</text:{style}>" for style, text in blocks)
    content = f'<?xml version="1.0"?>{doctype}<office:document-content {ns}><office:body><office:text>{body}' \
              "</office:text></office:body></office:document-content>"  # fmt: skip
    out = BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        archive.writestr("content.xml", content)
    return out.getvalue()
