// anywidget front end: the view over the `report` / `tab` / `selected` traits.

import { render as renderView } from "./render.js";

function render({ model, el }) {
  let view = null;
  const mount = () => {
    view?.destroy();
    view = renderView(el, model.get("report"), {
      tab: model.get("tab"),
      selected: model.get("selected"),
      onTab: (tab) => { model.set("tab", tab); model.save_changes(); },
      onSelect: (sel) => { model.set("selected", sel); model.save_changes(); },
    });
    view.ready.catch(() => {});
  };
  mount();
  const onSelected = () => view.select(model.get("selected"));
  const onTab = () => view.setTab(model.get("tab"));
  model.on("change:selected", onSelected);
  model.on("change:tab", onTab);
  model.on("change:report", mount);
  return () => {
    model.off("change:selected", onSelected);
    model.off("change:tab", onTab);
    model.off("change:report", mount);
    view?.destroy();
  };
}

export default { render };
