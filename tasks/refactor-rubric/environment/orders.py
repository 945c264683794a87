"""Order summaries for the billing team."""


def summarize_orders(text):
    customers = {}
    order = []
    errors = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5:
            errors += 1
            continue
        customer, sku, qty_text, price_text, coupon = parts
        if not customer or not sku:
            errors += 1
            continue
        try:
            qty = int(qty_text)
            price = float(price_text)
        except ValueError:
            errors += 1
            continue
        if qty <= 0 or price < 0:
            errors += 1
            continue
        coupon = coupon.upper()
        if coupon == "HALF":
            total = qty * price
            total = total - total * 0.5
        elif coupon == "TENOFF":
            total = qty * price
            total = total - 10
            if total < 0:
                total = 0
        elif coupon == "BULK":
            total = qty * price
            if qty >= 10:
                total = total - total * 0.2
        else:
            total = qty * price
        total = round(total, 2)
        if customer not in customers:
            customers[customer] = [0, 0.0]
            order.append(customer)
        customers[customer][0] = customers[customer][0] + qty
        customers[customer][1] = customers[customer][1] + total
    out = []
    grand = 0.0
    count = 0
    for customer in sorted(order, key=lambda c: (-customers[c][1], c)):
        items = customers[customer][0]
        amount = customers[customer][1]
        grand = grand + amount
        count = count + items
        amount_text = "$" + format(round(amount, 2), ",.2f")
        out.append(customer.ljust(12) + str(items).rjust(5) + " items " + amount_text.rjust(12))
    grand_text = "$" + format(round(grand, 2), ",.2f")
    out.append("TOTAL".ljust(12) + str(count).rjust(5) + " items " + grand_text.rjust(12))
    if errors:
        if errors == 1:
            out.append("skipped 1 bad line")
        else:
            out.append("skipped " + str(errors) + " bad lines")
    return "\n".join(out)
